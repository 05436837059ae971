package faults_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	bqpulsar "github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// pulsarSendTimeout is the runs' send timeout.
const pulsarSendTimeout = 5 * time.Second

var pulsarBroker = broker{
	name: "Pulsar", urlEnv: "BQ_PULSAR_URL", gate: "pulsar",
	bind:    func(t *testing.T, raw string) *faultsuite.Binding { return pulsarBinding(t, raw, "") },
	private: privatePulsar,
	open:    openPulsar,
}

// pulsarListenerParam names, in a worker's URL only, the advertised listener its client
// asks for (the faults module's own parameter, taken out before the URL is opened).
const pulsarListenerParam = "bqfaults_listener"

// openPulsar opens a worker's transport. A URL with a listener gets a client that asks
// the broker for that listener's address: the private broker advertises the proxy's,
// so every connection of the worker goes through it.
func openPulsar(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, nil, err
	}
	q := u.Query()
	listener := q.Get(pulsarListenerParam)
	if listener == "" {
		return openPlain(ctx, spec)
	}
	q.Del(pulsarListenerParam)
	u.RawQuery = q.Encode()
	client, err := pc.NewClient(pc.ClientOptions{URL: u.Scheme + "://" + u.Host, ListenerName: listener,
		ConnectionTimeout: 10 * time.Second, OperationTimeout: 30 * time.Second,
		Logger: pulsarlog.NewLoggerWithSlog(transport.LoggerFrom(ctx))})
	if err != nil {
		return nil, nil, err
	}
	tr, err := bqpulsar.New(client, bqpulsar.WithSendTimeout(pulsarSendTimeout), bqpulsar.WithLogger(transport.LoggerFrom(ctx)),
		bqpulsar.WithCloseClient())
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return tr, nil, nil
}

// pulsarBinding is the binding on the Pulsar at raw, whose admin REST API is admin
// (http://<host>:8080 when empty).
func pulsarBinding(t *testing.T, raw, admin string) *faultsuite.Binding {
	if admin == "" {
		admin = "http://" + parseURL(t, raw).Hostname() + ":8080"
	}
	policy := func(ctx context.Context, method, dlq, body string) error {
		endpoint := admin + "/admin/v2/persistent/public/default/" + url.PathEscape(dlq) + "/maxMessageSize"
		req, err := http.NewRequestWithContext(ctx, method, endpoint, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %s: %s", method, endpoint, resp.Status, b)
		}
		return nil
	}
	// A write the broker refuses fails only at the send timeout: pulsar-client-go drops
	// the producer's pending writes from its connection on NotAllowedError, without an
	// answer (the transport then replaces the producer). The send timeout bounds how
	// long a refused dead-letter write holds a worker.
	raw = withParams(raw, "send_timeout", strconv.Itoa(int(pulsarSendTimeout/time.Second)))
	return &faultsuite.Binding{
		Name: "Pulsar",
		URL:  func(faultsuite.Role, string) string { return raw },
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			if err := policy(ctx, http.MethodPost, dlq, "64"); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return policy(ctx, http.MethodDelete, dlq, "") }, nil
		},
		DLQMethod: "the dead-letter topic's maxMessageSize topic policy set to 64 bytes (admin REST API): the broker " +
			"refuses every dead letter; healed by removing the policy",
		Bounds: map[faultsuite.Scenario]time.Duration{faultsuite.DLQFailure: pulsarSendTimeout + faultsuite.DefaultBound},
		// Replaced by privatePulsar, whose cut carries the publisher too.
		PublisherUncut: "the shared Pulsar is not cut: its clients connect where a lookup sends them, past any proxy",
		Settings: "send_timeout=5 (default 30 s): a write the broker refuses fails only when it times out " +
			"(pulsar-client-go leaves it unanswered), so it bounds how long a refused dead-letter write holds a worker; " +
			"shared subscription: unacknowledged messages of a closed (or killed) consumer are redelivered at once; " +
			"acknowledgements wait for the broker's answer",
	}
}

// privatePulsar starts a Pulsar standalone of its own from the distribution
// scripts/brokers.sh caches (RocksDB metadata store, one in-process bookie, the
// distribution's standalone.conf on free loopback ports, a data directory of its own),
// with a second advertised listener, "faults", at the address of a loopback TCP proxy
// to its broker port: a client that asks for that listener (the workers) connects
// through the proxy, whatever address a lookup names. The restart is SIGTERM (a clean
// shutdown) and a start on the same data.
func privatePulsar(t *testing.T) *faultsuite.Binding {
	transporttest.BrokerURL(t, "BQ_PULSAR_URL", "pulsar")
	const hint = "; run `scripts/brokers.sh up pulsar` (it installs java and caches the Pulsar distribution)"
	version := os.Getenv("BQ_PULSAR_VERSION")
	if version == "" {
		version = "4.0.8"
	}
	home := filepath.Join(cacheDir(), "apache-pulsar-"+version)
	if _, err := os.Stat(filepath.Join(home, "bin", "pulsar")); err != nil {
		brokerproc.Require(t, "no cached Pulsar distribution (%s)%s", home, hint)
	}
	dir := privateDir(t, "pulsar")
	for _, d := range []string{"data", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := brokerproc.FreePort(t)
	web := brokerproc.FreePort(t, port)
	proxy, err := faultproxy.New("127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	tmpl, err := os.ReadFile(filepath.Join(home, "conf", "standalone.conf"))
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{
		"bindAddress": "127.0.0.1", "advertisedAddress": "127.0.0.1",
		"brokerServicePort": strconv.Itoa(port), "webServicePort": strconv.Itoa(web),
	}
	var conf strings.Builder
	for _, line := range strings.Split(string(tmpl), "\n") {
		if k, _, ok := strings.Cut(line, "="); ok {
			if v, ok := set[k]; ok {
				line = k + "=" + v
			}
		}
		conf.WriteString(line + "\n")
	}
	fmt.Fprintf(&conf, `
# --- the fault suite ---
advertisedListeners=internal:pulsar://127.0.0.1:%d,faults:pulsar://%s
internalListenerName=internal
listeningInterface=lo
allowLoopback=true
dbStorage_writeCacheMaxSizeMb=32
dbStorage_readAheadCacheMaxSizeMb=32
dbStorage_rocksDB_blockCacheSize=16777216
journalSyncData=false
`, port, proxy.Addr())
	confPath := filepath.Join(dir, "standalone.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("http://127.0.0.1:%d", web)
	p := brokerproc.New(t, brokerproc.Config{
		Name: "private Pulsar standalone",
		Command: func() *exec.Cmd {
			cmd := exec.Command(filepath.Join(home, "bin", "pulsar"), "standalone", "--no-functions-worker", "--no-stream-storage",
				"--advertised-address", "127.0.0.1", "--bookkeeper-dir", filepath.Join(dir, "data", "bookkeeper"),
				"--metadata-dir", filepath.Join(dir, "data", "metadata"))
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PULSAR_HOME="+home, "PULSAR_MEM=-Xms128m -Xmx512m -XX:MaxDirectMemorySize=256m",
				"PULSAR_GC=-XX:+UseG1GC -XX:MaxGCPauseMillis=20", "PULSAR_LOG_DIR="+filepath.Join(dir, "logs"),
				"PULSAR_LOG_APPENDER=Console", "PULSAR_LOG_LEVEL=warn", "PULSAR_STANDALONE_CONF="+confPath)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		Log:          filepath.Join(dir, "node.log"),
		Ready:        func() error { return pulsarReady(admin, port) },
		Poll:         500 * time.Millisecond,
		StartTimeout: 5 * time.Minute,
		Awaiting:     "serve public/default",
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	raw := fmt.Sprintf("pulsar://127.0.0.1:%d", port)
	b := pulsarBinding(t, raw, admin)
	direct := b.URL
	b.URL = func(role faultsuite.Role, queue string) string {
		if role == faultsuite.RoleWorker {
			return withParams("pulsar://"+proxy.Addr(), "send_timeout", strconv.Itoa(int(pulsarSendTimeout/time.Second)),
				pulsarListenerParam, "faults")
		}
		return direct(role, queue)
	}
	b.Cut = proxy
	// The publisher asks for the proxy's listener too: the cut takes its connections.
	b.OpenPublisher = func(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
		spec.URL = b.URL(faultsuite.RoleWorker, spec.Queue)
		return openPulsar(ctx, spec)
	}
	b.CutMethod = "every connection of every worker cut by a loopback TCP proxy (a private Pulsar advertises the " +
		"proxy's address as a listener of its own, which the workers' clients ask for)"
	b.Stop = func() error { p.Stop(); return nil }
	b.Start = p.Start
	b.RestartMethod = "SIGTERM of a private Pulsar standalone (a clean shutdown; RocksDB metadata store and bookie on disk), " +
		"started again on its data"
	return b
}

// pulsarReady reports whether a standalone serves: its admin API lists the standalone
// cluster and the namespace public/default, its health check (a write and a read of a
// topic of its own) passes, and its broker port takes a connection. A broker that
// merely answers may not serve topics yet (its bundles load after a restart).
func pulsarReady(admin string, port int) error {
	get := func(path, want string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+path, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), want) {
			return fmt.Errorf("%s: %s", path, b)
		}
		return nil
	}
	if err := get("/admin/v2/clusters", "standalone"); err != nil {
		return err
	}
	if err := get("/admin/v2/namespaces/public", "public/default"); err != nil {
		return err
	}
	if err := get("/admin/v2/brokers/health", "ok"); err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
