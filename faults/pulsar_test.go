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

// pulsarSendTimeout is the workers' send timeout (it bounds how long a refused
// dead-letter write holds one); the run's publisher keeps the default (30 s), within
// which a Publish waits out a cut.
const pulsarSendTimeout = 5 * time.Second

var pulsarBroker = broker{
	name: "Pulsar", urlEnv: "BQ_PULSAR_URL", gate: "pulsar",
	bind:    func(t *testing.T, raw string) *faultsuite.Binding { return pulsarBinding(t, raw, "") },
	private: privatePulsar,
	open:    openPulsar,
	raceInClient: "pulsar-client-go v0.19.0 races when a producer reconnects while it sends: grabCnx, on the " +
		"reconnection's goroutine, writes the producer's name (producer_partition.go:348) that the events loop " +
		"reads to serialize a send (internalSingleSend); the race detector then fails the workers (exit status 66)",
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
	cfg, err := bqpulsar.ParseURL(u)
	if err != nil {
		return nil, nil, err
	}
	// The settings OpenURL gives its own client, the keep-alive among them (a client
	// given to New keeps its own).
	client, err := pc.NewClient(pc.ClientOptions{URL: u.Scheme + "://" + u.Host, ListenerName: listener,
		ConnectionTimeout: 10 * time.Second, OperationTimeout: 30 * time.Second, KeepAliveInterval: bqpulsar.KeepAliveInterval,
		Logger: pulsarlog.NewLoggerWithSlog(transport.LoggerFrom(ctx))})
	if err != nil {
		return nil, nil, err
	}
	opts := []bqpulsar.Option{bqpulsar.WithLogger(transport.LoggerFrom(ctx)), bqpulsar.WithCloseClient()}
	if cfg.SendTimeout > 0 {
		opts = append(opts, bqpulsar.WithSendTimeout(cfg.SendTimeout))
	}
	tr, err := bqpulsar.New(client, opts...)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return tr, nil, nil
}

// awaitPolicy waits until the admin REST API at admin answers want for the
// maxMessageSize policy of the topic dlq (a topic policy reaches the broker through a
// system topic, a moment after it is set).
func awaitPolicy(ctx context.Context, admin, dlq, want string) error {
	endpoint := admin + "/admin/v2/persistent/public/default/" + url.PathEscape(dlq) + "/maxMessageSize"
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got = strings.TrimSpace(string(b)); got == want {
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("GET %s: still %q after 30s, want %q", endpoint, got, want)
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
	publisher := raw
	raw = withParams(raw, "send_timeout", strconv.Itoa(int(pulsarSendTimeout/time.Second)))
	return &faultsuite.Binding{
		Name: "Pulsar",
		URL: func(role faultsuite.Role, _ string) string {
			if role == faultsuite.RolePublisher {
				return publisher
			}
			return raw
		},
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			if err := policy(ctx, http.MethodPost, dlq, "64"); err != nil {
				return nil, err
			}
			// A topic policy travels through a system topic before the broker holds it:
			// the fault starts once the broker says it has it.
			if err := awaitPolicy(ctx, admin, dlq, "64"); err != nil {
				return nil, err
			}
			broke := time.Now()
			return func(ctx context.Context) error {
				// A refused write fails only at the send timeout (above): the fault lasts
				// past it, so that a write refused at its start fails before the heal.
				// Healed sooner (the short form's 3 s), such a write is sent again by
				// the producer that replaces the refused one, after the heal, and holds:
				// under load none failed and the run said the fault did not bite.
				select {
				case <-time.After(time.Until(broke.Add(pulsarSendTimeout + time.Second))):
				case <-ctx.Done():
					return ctx.Err()
				}
				return policy(ctx, http.MethodDelete, dlq, "")
			}, nil
		},
		DLQMethod: "the dead-letter topic's maxMessageSize topic policy set to 64 bytes (admin REST API): the broker " +
			"refuses every dead letter; healed by removing the policy, at the earliest the send timeout and 1 s after " +
			"the broker reported the policy (a refused write fails only at the send timeout)",
		Bounds: map[faultsuite.Scenario]time.Duration{faultsuite.DLQFailure: pulsarSendTimeout + faultsuite.DefaultBound},
		// Held deliveries, and pipelined settlements whose writes or acknowledgement the
		// broker has not answered yet (transport/pulsar TestPipelineBoundsUnansweredSettlements).
		Duplicates: heldWindow(pipelinedWindow, "the deliveries a consumer held (prefetch = concurrency) and its "+
			"pipelined settlements not answered yet (at most the pipeline depth, max(256, prefetch)): a settle write "+
			"made and its acknowledgement lost with the connection, or with the killed worker, redelivers"),
		// Replaced by privatePulsar, whose cut carries the publisher too.
		PublisherUncut: "the shared Pulsar is not cut: its clients connect where a lookup sends them, past any proxy",
		Settings: "send_timeout=5 for the workers (default 30 s, which the run's publisher keeps): a write the broker refuses fails only when it times out " +
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
	proxy := faultproxy.Start(t, "127.0.0.1:"+strconv.Itoa(port))
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
	// It keeps the default send timeout, as the publisher on the direct URL.
	b.OpenPublisher = func(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
		spec.URL = withParams("pulsar://"+proxy.Addr(), pulsarListenerParam, "faults")
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
