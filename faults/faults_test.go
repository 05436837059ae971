package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A worker process is this test binary run again: TestMain hands it to the engine.
func TestMain(m *testing.M) {
	if faultsuite.IsWorker() {
		os.Exit(faultsuite.WorkerMain(openWorker))
	}
	os.Exit(m.Run())
}

// broker is one broker of the suite.
type broker struct {
	name string
	// urlEnv names the variable of the shared broker's URL (scripts/brokers.sh env),
	// gate the broker as scripts/brokers.sh names it.
	urlEnv, gate string
	// bind returns the binding on the broker at raw.
	bind func(t *testing.T, raw string) *faultsuite.Binding
	// private starts a private broker with persistence on and returns the binding on
	// it, with Stop and Start, for the restart scenario (and for a cut the shared
	// broker cannot carry).
	private func(t *testing.T) *faultsuite.Binding
	// open opens a worker's transport; with spec.Cut every connection goes through a
	// loopback TCP proxy in the worker, which the run cuts and heals.
	open faultsuite.Opener
	// sharedCut is false when a cut needs the private broker (Pulsar: its clients dial
	// the address the broker advertises, not the proxy's).
	sharedCut bool
	// shortRestart includes the restart in the short form (a private broker that
	// starts in seconds).
	shortRestart bool
}

var brokers = []broker{redisBroker, amqpBroker, kafkaBroker, sqsBroker, artemisBroker, pulsarBroker}

// shared returns the binding on the broker the test suites share (kill, cut and
// dead-letter refusal never stop it): under CI=true a broker that does not answer fails
// the test, elsewhere it skips it.
func (b broker) shared(t *testing.T) *faultsuite.Binding {
	return b.bind(t, transporttest.BrokerURL(t, b.urlEnv, b.gate))
}

// parseURL parses a broker URL of the test.
func parseURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// openWorker is the Opener of every worker process: the binding's, by its name.
func openWorker(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
	for _, b := range brokers {
		if b.name == spec.Broker {
			return b.open(ctx, spec)
		}
	}
	return nil, nil, fmt.Errorf("no broker named %q", spec.Broker)
}

// full is the full form of the suite: make faults.
func full() bool { return os.Getenv("BQ_FAULTS") == "full" }

// TestFaults runs every scenario the form includes on every broker and fails a run
// that lost a message, stalled, recovered past its bound or saw anything that must not
// happen (a good message dead-lettered, a wrong reason, a worker that crashed). BQ_FAULTS_OUT names a file for the results as JSON (make
// faults renders it into docs/reliability.md); BQ_FAULTS_ONLY=name[,name] limits the
// brokers and BQ_FAULTS_SCENARIOS=kill,cut,blackhole,blackhole-forever,restart,dlq the
// scenarios.
func TestFaults(t *testing.T) {
	form, plan, slack := "short", faultsuite.Short, 2.0
	if full() {
		form, plan, slack = "full", faultsuite.Full, 1.0
	}
	var (
		mu      sync.Mutex
		results []*faultsuite.Result
	)
	if out := os.Getenv("BQ_FAULTS_OUT"); out != "" {
		t.Cleanup(func() {
			if err := faultsuite.WriteResults(out, results); err != nil {
				t.Error(err)
			}
		})
	}
	logDir := os.Getenv("BQ_FAULTS_LOGS")
	for _, b := range brokers {
		if !selected("BQ_FAULTS_ONLY", strings.ToLower(b.name)) {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			// The short form runs the brokers side by side; the full form one after the
			// other (BQ_FAULTS_PARALLEL=1 side by side), so that the recovery times it
			// publishes are not those of six brokers fighting over the CPU.
			if !full() || os.Getenv("BQ_FAULTS_PARALLEL") == "1" {
				t.Parallel()
			}
			for _, sc := range faultsuite.Scenarios {
				if !selected("BQ_FAULTS_SCENARIOS", sc.Slug()) || !b.runs(sc) {
					continue
				}
				t.Run(sc.Slug(), func(t *testing.T) {
					var binding *faultsuite.Binding
					if sc == faultsuite.Restart || throughProxy(sc) && !b.sharedCut {
						binding = b.private(t)
					} else {
						binding = b.shared(t)
					}
					if binding.OpenPublisher == nil && binding.Cut == nil {
						// The run's publisher goes through a proxy of its own, cut with the workers'.
						binding.OpenPublisher = b.open
					}
					dir := logDir
					if dir == "" {
						dir = t.TempDir()
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					defer cancel()
					res, err := faultsuite.Run(ctx, binding, plan(sc), faultsuite.Env{Spawn: spawnWorker, Logf: t.Logf, Dir: dir})
					if err != nil {
						t.Fatal(err)
					}
					res.Form = form
					if res.DetectBound > 0 {
						t.Logf("dead connections found in %s (bound %s): %s", res.Detection.Round(time.Millisecond), res.DetectBound, res.DetectionOf)
					}
					t.Logf("%s, %s: published %d, handled %d, dead-lettered %d (+%d destroyed), missing %d, duplicates %d; "+
						"recovery %s (bound %s, %s); fault lasted %s; failed settlements %v, failed receives %d, dead-lettered again %d, longest pause %s; took %.1fs",
						res.Broker, res.Scenario, res.Published, res.Handled, res.DeadLettered, res.Destroyed, res.Missing, res.Duplicates,
						res.Recovery.Round(time.Millisecond), res.Bound, res.RecoveryOf, res.Down.Round(time.Millisecond),
						res.FailedSettles, res.ReceiveErrors, res.DeadLetteredAgain, res.Pause.Round(time.Millisecond), res.Elapsed)
					if res.PublisherCut {
						t.Logf("publisher through the cut: %d publishes during it (%d returned nil), %d publish errors, longest Publish %s",
							res.PublishesInFault, res.PublishesInFaultOK, res.PublishErrors, res.LongestPublish.Round(time.Millisecond))
					} else if res.PublisherUncut != "" {
						t.Logf("publisher not cut: %s", res.PublisherUncut)
					}
					for _, n := range res.Notes {
						t.Log("  " + n)
					}
					failures := res.Failures(slack)
					for _, f := range failures {
						t.Error(f)
					}
					if len(failures) > 0 && logDir == "" {
						t.Log("run again with BQ_FAULTS_LOGS=<dir> to keep the workers' logs")
					}
					mu.Lock()
					results = append(results, res)
					mu.Unlock()
				})
			}
		})
	}
}

// spawnWorker returns the command of a worker process: this test binary again, which
// dies with the test process whatever happens to it.
func spawnWorker() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// runs reports whether the form includes scenario s for b.
func (b broker) runs(s faultsuite.Scenario) bool {
	switch s {
	case faultsuite.Restart:
		return b.private != nil && (full() || b.shortRestart)
	case faultsuite.Cut, faultsuite.Blackhole, faultsuite.BlackholeForever:
		return b.sharedCut || full() && b.private != nil
	}
	return true
}

// throughProxy reports whether s is made by the proxy the workers' connections go
// through: a cut, or a blackhole (a faultproxy.Proxy is a faultsuite.Freezer).
func throughProxy(s faultsuite.Scenario) bool {
	return s == faultsuite.Cut || s == faultsuite.Blackhole || s == faultsuite.BlackholeForever
}

// selected reports whether name is in the comma-separated list of env (an unset env
// selects everything).
func selected(env, name string) bool {
	v := os.Getenv(env)
	if v == "" {
		return true
	}
	for _, s := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return true
		}
	}
	return false
}

// withParams returns raw with the query parameters kv (name, value, …) added.
func withParams(raw string, kv ...string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw // the transport reports it
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openThrough returns an opener of a worker's URL that, for a cut, puts a loopback
// proxy in front of the address target finds in the URL (set puts the proxy's address
// in its place); the proxy is the switch.
func openThrough(target func(u *url.URL) (addr string, set func(proxy string), err error)) faultsuite.Opener {
	return func(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
		if !spec.Cut {
			return openPlain(ctx, spec)
		}
		u, err := url.Parse(spec.URL)
		if err != nil {
			return nil, nil, err
		}
		addr, set, err := target(u)
		if err != nil {
			return nil, nil, err
		}
		p, err := faultproxy.New(addr)
		if err != nil {
			return nil, nil, err
		}
		set(p.Addr())
		tr, err := transport.Open(ctx, u.String())
		if err != nil {
			_ = p.Close()
			return nil, nil, err
		}
		return tr, p, nil
	}
}

// openPlain opens a worker's URL as it is, without a switch.
func openPlain(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
	tr, err := transport.Open(ctx, spec.URL)
	return tr, nil, err
}

// openProxied proxies the URL's host.
var openProxied = openThrough(func(u *url.URL) (string, func(string), error) {
	return u.Host, func(proxy string) { u.Host = proxy }, nil
})

// javaDist finds java (BQ_JAVA, else on PATH) and the distribution scripts/brokers.sh
// caches in ${BQ_CACHE_DIR}/<name>-<version> (version from versionEnv, else def), which
// must hold a file matching probe; without either the test skips, or fails under
// CI=true, with hint.
func javaDist(t *testing.T, name, versionEnv, def, probe, hint string) (java, dist string) {
	t.Helper()
	java = os.Getenv("BQ_JAVA")
	if java == "" {
		var err error
		if java, err = exec.LookPath("java"); err != nil {
			brokerproc.Require(t, "no java on PATH and BQ_JAVA unset%s", hint)
		}
	}
	version := os.Getenv(versionEnv)
	if version == "" {
		version = def
	}
	dist = filepath.Join(cacheDir(), name+"-"+version)
	if m, _ := filepath.Glob(filepath.Join(dist, probe)); len(m) == 0 {
		brokerproc.Require(t, "no cached %s distribution in %s (no %s)%s", name, dist, probe, hint)
	}
	return java, dist
}

// cacheDir is where scripts/brokers.sh caches the broker distributions.
func cacheDir() string {
	if d := os.Getenv("BQ_CACHE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "babelqueue")
}

// privateDir returns a directory for a private broker's data: under BQ_FAULTS_LOGS when
// set (kept for a look after the run), else the test's temporary directory.
func privateDir(t *testing.T, name string) string {
	t.Helper()
	if d := os.Getenv("BQ_FAULTS_LOGS"); d != "" {
		dir, err := os.MkdirTemp(d, name+"-")
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
