package faults_test

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A worker process is this test binary run again: TestMain hands it to the engine.
func TestMain(m *testing.M) {
	if faultsuite.IsWorker() {
		os.Exit(faultsuite.WorkerMain(openWorker))
	}
	flag.Parse()
	sideBySide()
	code := m.Run()
	if out := os.Getenv("BQ_FAULTS_OUT"); out != "" && len(recorded.results) > 0 {
		if err := faultsuite.WriteResults(out, recorded.results); err != nil {
			fmt.Fprintln(os.Stderr, "write the results:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// recorded are the results of every run of the test binary, TestFaults' and the
// cluster tests', written to BQ_FAULTS_OUT once they all ran (make faults renders
// them into docs/reliability.md, a table per broker and per cluster).
var recorded struct {
	mu      sync.Mutex
	results []*faultsuite.Result
}

func record(res *faultsuite.Result) {
	recorded.mu.Lock()
	recorded.results = append(recorded.results, res)
	recorded.mu.Unlock()
}

// recordCluster records res, a run of a cluster test, under broker, setup (the
// cluster) and scenario (the node failure; the subtest's name when empty), with the
// verdict of t, which judges it by bounds of its own (the pause against the failover it
// measured): known once t has finished.
func recordCluster(t *testing.T, res *faultsuite.Result, broker, setup, scenario string) {
	if scenario == "" {
		scenario = strings.ReplaceAll(filepath.Base(t.Name()), "-", " ")
	}
	res.Broker, res.Setup, res.Case, res.Judged = broker, setup, scenario, true
	if res.Form == "" {
		res.Form = map[bool]string{true: "full", false: "short"}[full()]
	}
	t.Cleanup(func() {
		res.Failed = t.Failed()
		record(res)
	})
}

// runsAtOnce is how many of the suite's runs go side by side in the short form
// (parallelShort) when go test is not given -parallel: the six brokers of TestFaults
// and two more. A run mostly waits (on its paced stream, the fault's length, the
// brokers, its worker processes), so the CPUs are not the measure: -parallel's default
// (GOMAXPROCS, 2 on a two-core machine) put them two by two, and the short form took
// the sum of its cluster tests' times.
const runsAtOnce = 8

// sideBySide raises -test.parallel to runsAtOnce unless the command line set it.
func sideBySide() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	f := flag.Lookup("test.parallel")
	if f == nil || given {
		return
	}
	if n, err := strconv.Atoi(f.Value.String()); err == nil && n < runsAtOnce {
		_ = f.Value.Set(strconv.Itoa(runsAtOnce))
	}
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
	// raceInClient, when set, says why the broker's client library fails the race
	// detector when its connections are cut: the short form then runs the scenarios
	// of the private broker only without it (scripts/test.sh runs them so, after
	// go test -race).
	raceInClient string
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
// that lost a message, stalled, recovered past its bound, made more duplicates than the
// broker's documented bound, found a dead connection past 10 s, failed a publish through
// a cut or saw anything that must not happen (a good message dead-lettered, a wrong
// reason, a worker that crashed), naming the row. BQ_FAULTS_OUT names a file for the
// results as JSON, the cluster tests' too (make faults renders it into
// docs/reliability.md); BQ_FAULTS_ONLY=name[,name] limits the
// brokers and BQ_FAULTS_SCENARIOS=kill,cut,blackhole,blackhole-forever,restart,dlq the
// scenarios.
func TestFaults(t *testing.T) {
	parallelShort(t)
	form, plan, slack := "short", faultsuite.Short, 2.0
	if full() {
		form, plan, slack = "full", faultsuite.Full, 1.0
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
			if b.raceInClient != "" && raceDetector && !full() {
				t.Logf("the cut and blackholes run without the race detector (scripts/test.sh, after go test -race): %s", b.raceInClient)
			}
			// A broker whose cut needs the private broker (Pulsar) starts it once, for
			// its cut, blackholes and restart one after the other: it takes a minute.
			var private *faultsuite.Binding
			if !b.sharedCut && slices.ContainsFunc(faultsuite.Scenarios, func(sc faultsuite.Scenario) bool {
				return (throughProxy(sc) || sc == faultsuite.Restart) && selected("BQ_FAULTS_SCENARIOS", sc.Slug()) && b.runs(sc)
			}) {
				private = b.private(t)
			}
			for _, sc := range faultsuite.Scenarios {
				if !selected("BQ_FAULTS_SCENARIOS", sc.Slug()) || !b.runs(sc) {
					continue
				}
				t.Run(sc.Slug(), func(t *testing.T) {
					var binding *faultsuite.Binding
					switch {
					case private != nil && (sc == faultsuite.Restart || throughProxy(sc)):
						binding = private
					case sc == faultsuite.Restart || throughProxy(sc) && !b.sharedCut:
						binding = b.private(t)
					default:
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
						t.Errorf("%s, %s: %s", res.Broker, res.Scenario, f)
					}
					if len(failures) > 0 && logDir == "" {
						t.Log("run again with BQ_FAULTS_LOGS=<dir> to keep the workers' logs")
					}
					record(res)
				})
			}
		})
	}
}

// parallelShort runs t beside the suite's other top-level tests in the short form (make
// test): TestFaults and the cluster tests (TestClusterFaults*) never share a broker
// process that one of them stops or kills (the shared brokers are only cut through a
// proxy or refused a write; each restart, cluster and pair it kills is its own, and the
// shared kafka-cluster is taken with brokerproc.LockCluster), so side by side they take
// the time of the longest instead of the sum. The full form (make faults) runs them
// one after the other, so that the recovery times it publishes are not those of tests
// fighting over the CPU.
func parallelShort(t *testing.T) {
	t.Helper()
	if !full() {
		t.Parallel()
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
		// Not through the private broker under the race detector (Pulsar): see
		// raceInClient.
		return b.sharedCut || b.private != nil && (full() || !raceDetector || b.raceInClient == "")
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

// heldWindow is the duplicate bound of a broker that, after a fault, redelivers at most
// window(p) deliveries each consumer the fault struck had handled and not settled at the
// broker (faultsuite.Affected: the killed worker, or every worker).
func heldWindow(window func(p faultsuite.Plan) int, of string) func(faultsuite.Plan) (int, string) {
	return func(p faultsuite.Plan) (int, string) {
		n := faultsuite.Affected(p)
		if n == 0 {
			return 0, ""
		}
		w := window(p)
		return n * w, fmt.Sprintf("%d × %d, %s", n, w, of)
	}
}

// prefetch is a worker's prefetch: the runtime's default, its concurrency.
func prefetch(p faultsuite.Plan) int { return p.Concurrency }

// pipelinedWindow is what a worker whose transport pipelines its settlements may hold
// unsettled at the broker: its prefetch and the pipeline's depth (driverkit's default,
// max(256, prefetch)).
func pipelinedWindow(p faultsuite.Plan) int {
	return p.Concurrency + max(p.Concurrency, driverkit.DefaultPipelineDepth)
}
