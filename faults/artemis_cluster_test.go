package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// artemisPair is a private Artemis primary/backup pair with replication, started by
// scripts/brokers.sh as artemis-ha (the shared pair's configuration) in a state
// directory and on loopback ports of its own, so that killing its nodes disturbs no
// other test. Node 1 is the primary, node 2 the backup.
type artemisPair struct {
	t     *testing.T
	env   []string
	state string // its BQ_STATE_DIR
	amqp  [3]int // by node number
	url   string
}

// startArtemisPair starts a private pair and stops it with the test.
func startArtemisPair(t *testing.T) *artemisPair {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		brokerproc.Require(t, "no bash to run scripts/brokers.sh")
	}
	p := &artemisPair{t: t}
	var taken []int
	free := func() int { n := brokerproc.FreePort(t, taken...); taken = append(taken, n); return n }
	p.amqp[1], p.amqp[2] = free(), free()
	core1, core2 := free(), free()
	p.state = privateDir(t, "artemis-ha")
	p.env = append(os.Environ(),
		"BQ_STATE_DIR="+p.state,
		fmt.Sprintf("BQ_ARTEMIS_HA_AMQP_PORTS=%d %d", p.amqp[1], p.amqp[2]),
		fmt.Sprintf("BQ_ARTEMIS_HA_CORE_PORTS=%d %d", core1, core2),
		"BQ_BROKER_TIMEOUT=240")
	t.Cleanup(func() { _, _ = p.brokers(2*time.Minute, "down", "artemis-ha") })
	if out, err := p.brokers(5*time.Minute, "up", "artemis-ha"); err != nil {
		brokerproc.Require(t, "the private Artemis pair did not start: %v\n%s", err, out)
	}
	out, err := p.brokers(30*time.Second, "env", "artemis-ha")
	if err != nil {
		t.Fatalf("brokers.sh env artemis-ha: %v\n%s", err, out)
	}
	_, p.url, _ = strings.Cut(strings.TrimSpace(out), "BQ_ARTEMIS_CLUSTER_URL=")
	if p.url == "" {
		t.Fatalf("brokers.sh env artemis-ha printed no URL: %s", out)
	}
	return p
}

// brokers runs scripts/brokers.sh with the pair's environment.
func (p *artemisPair) brokers(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join("..", "scripts", "brokers.sh")}, args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// node kills (SIGKILL), stops (gracefully) or starts node n.
func (p *artemisPair) node(action string, n int) error {
	if out, err := p.brokers(2*time.Minute, "node", "artemis-ha", action, strconv.Itoa(n)); err != nil {
		return fmt.Errorf("%s node %d: %v: %s", action, n, err, out)
	}
	return nil
}

// up starts the nodes not running and waits until one is active and the other
// replicates it (a restarted primary has failed back by then).
func (p *artemisPair) up() error {
	if out, err := p.brokers(5*time.Minute, "up", "artemis-ha"); err != nil {
		return fmt.Errorf("brokers.sh up artemis-ha: %v: %s", err, out)
	}
	return nil
}

// serving reports whether node n takes connections (is active: a passive backup's
// acceptors are closed).
func (p *artemisPair) serving(n int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.amqp[n])), time.Second)
	if err == nil {
		_ = c.Close()
	}
	return err == nil
}

// active returns the node that takes connections.
func (p *artemisPair) active() (int, error) {
	for _, n := range []int{1, 2} {
		if p.serving(n) {
			return n, nil
		}
	}
	return 0, errors.New("no node of the pair is active")
}

// artemisFailover is the broker's own failover after a kill: from the kill until the
// other node took connections.
type artemisFailover struct {
	killed int
	took   time.Duration
	err    error
}

// kill kills the active node with SIGKILL and returns a channel that says, once the
// other node activated, how long after the kill that was.
func (p *artemisPair) kill() (killed int, failover <-chan artemisFailover, err error) {
	if killed, err = p.active(); err != nil {
		return 0, nil, err
	}
	// SIGKILL to the pid brokers.sh recorded, timed here; then brokers.sh's own kill
	// (a no-op on the dead process) forgets the pid file.
	b, err := os.ReadFile(filepath.Join(p.state, fmt.Sprintf("artemis-ha-node%d.pid", killed)))
	if err != nil {
		return killed, nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return killed, nil, fmt.Errorf("node %d's pid file: %w", killed, err)
	}
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return killed, nil, fmt.Errorf("kill node %d (pid %d): %w", killed, pid, err)
	}
	done := make(chan artemisFailover, 1)
	go func() {
		f := artemisFailover{killed: killed}
		for !p.serving(3 - killed) {
			if time.Since(start) > time.Minute {
				f.err = fmt.Errorf("node %d did not activate within a minute of the kill of node %d", 3-killed, killed)
				done <- f
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		f.took = time.Since(start)
		done <- f
	}()
	if err := p.node("kill", killed); err != nil {
		return killed, nil, err
	}
	return killed, done, nil
}

// TestClusterFaultsArtemis runs the node failures of issue 35 on a private Artemis pair, each
// accounted by meta.id like TestFaults: the kill -9 of the active node mid-run (work
// resumes within the broker's failover plus 5 s) and publishes made through a failover
// (every Publish that returned nil is on the broker afterwards); in the full form (make
// faults) also a rolling restart of both nodes while producing and consuming.
// BQ_FAULTS_ONLY=artemis-ha selects it alone.
func TestClusterFaultsArtemis(t *testing.T) {
	if !selected("BQ_FAULTS_ONLY", "artemis") && !selected("BQ_FAULTS_ONLY", "artemis-ha") {
		t.Skip("not selected by BQ_FAULTS_ONLY")
	}
	parallelShort(t) // the pair is this test's own
	pair := startArtemisPair(t)
	form, slack := "short", 2.0
	if full() {
		form, slack = "full", 1.0
	}
	binding := func(stop, start func() error, method string) *faultsuite.Binding {
		b := artemisBinding(t, pair.url)
		b.Stop, b.Start, b.RestartMethod = stop, start, method
		b.Settings = "a passive backup takes no connections: the driver dials the URL's other node first " +
			"(driverkit.Failover), with its reconnection backoff (WithMaxBackoff, 2 s); deliveries not accepted " +
			"when the node died are in the backup's replicated journal and delivered again"
		return b
	}
	run := func(t *testing.T, b *faultsuite.Binding, plan faultsuite.Plan) (*faultsuite.Result, []string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		dir := os.Getenv("BQ_FAULTS_LOGS")
		if dir == "" {
			dir = t.TempDir()
		}
		res, err := faultsuite.Run(ctx, b, plan, faultsuite.Env{Spawn: spawnWorker, Logf: t.Logf, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		res.Form = form
		recordCluster(t, res, "Artemis", "primary and backup", "")
		t.Logf("Artemis pair, %s (%s form): published %d, handled %d, dead-lettered %d, missing %d, duplicates %d; "+
			"longest pause in the fault %s; recovery after the node was started again %s (bound %s); "+
			"failed settlements %v, failed receives %d, publish retries %d; took %.1fs",
			res.Method, form, res.Published, res.Handled, res.DeadLettered, res.Missing, res.Duplicates,
			res.Pause.Round(time.Millisecond), res.Recovery.Round(time.Millisecond), res.Bound,
			res.FailedSettles, res.ReceiveErrors, res.PublishRetries, res.Elapsed)
		for _, n := range res.Notes {
			t.Log("  " + n)
		}
		// A failover bites whether or not a worker's Receive returned an error (the
		// driver reconnects inside it): the kill is the proof.
		return res, slices.DeleteFunc(res.Failures(slack), func(f string) bool { return strings.Contains(f, "did not bite") })
	}

	t.Run("primary-kill", func(t *testing.T) {
		// Publishing goes on through the fault (the middle third of the stream lasts 5 s,
		// the fault 4 s), so the longest pause in it is how long the work stopped. The
		// primary is started again at the heal and fails back while the last third runs.
		plan := faultsuite.Short(faultsuite.Restart)
		plan.Messages, plan.Rate, plan.Down = 900, 60, 4*time.Second
		if full() {
			plan = faultsuite.Full(faultsuite.Restart)
			plan.Messages, plan.Rate, plan.Down = 3000, 100, 8*time.Second
		}
		var (
			killed int
			moved  <-chan artemisFailover
			f      artemisFailover
		)
		// The heal waits for the failover too, so that the fault's window holds all of
		// it however long it takes.
		b := binding(func() (err error) {
			killed, moved, err = pair.kill()
			return err
		}, func() error {
			if f = <-moved; f.err != nil {
				return f.err
			}
			return pair.node("start", killed)
		},
			"SIGKILL of the active node (the primary); the backup activates on its replicated journal; "+
				"the primary started again after the fault's duration fails back")
		res, failures := run(t, b, plan)
		// Work resumes within the broker's failover time plus 5 s.
		bound := f.took + faultsuite.DefaultBound
		t.Logf("node %d killed: node %d active %s later (the broker's failover); work resumed %s after the kill (bound %s)",
			f.killed, 3-f.killed, f.took.Round(time.Millisecond), res.Pause.Round(time.Millisecond), bound.Round(time.Millisecond))
		if limit := time.Duration(float64(bound) * slack); res.Pause > limit {
			failures = append(failures, fmt.Sprintf("work stopped for %s after the kill, past %s (the failover, %s, + %s)",
				res.Pause.Round(time.Millisecond), limit.Round(time.Millisecond), f.took.Round(time.Millisecond), faultsuite.DefaultBound))
		}
		for _, f := range failures {
			t.Error(f)
		}
		if err := pair.up(); err != nil {
			t.Fatalf("the pair did not heal: %v", err)
		}
	})

	t.Run("publish-through-failover", func(t *testing.T) {
		artemisPublishThroughFailover(t, pair, form)
	})

	if !full() {
		return
	}
	t.Run("rolling-restart", func(t *testing.T) {
		// One node after the other while the stream goes on: the backup (stopped, started,
		// in sync again), then the primary, whose graceful stop hands over to the backup,
		// started again (it fails back). The middle third of the stream (80 s) runs beside
		// it, so that the longest pause in the fault is work stopped, not a stream
		// waiting for the heal; the pair's own gaps (no node taking connections) are
		// measured beside it.
		plan := faultsuite.Full(faultsuite.Restart)
		plan.Messages, plan.Rate, plan.Down, plan.Drain = 14400, 60, 60*time.Second, 5*time.Minute
		done := make(chan error, 1)
		var gap time.Duration
		b := binding(func() error {
			stop := make(chan struct{})
			watched := make(chan time.Duration, 1)
			go func() { watched <- pair.longestGap(stop) }()
			go func() {
				err := pair.node("stop", 2)
				for _, step := range []func() error{pair.up, func() error { return pair.node("stop", 1) }, pair.up} {
					if err == nil {
						err = step()
					}
				}
				close(stop)
				gap = <-watched
				done <- err
			}()
			return nil
		}, func() error { return <-done },
			"rolling restart while producing and consuming: the backup stopped (SIGTERM) and started again until in sync, "+
				"then the primary stopped (the backup activates) and started again (it fails back)")
		res, failures := run(t, b, plan)
		// Work resumes within the pair's own longest gap plus 5 s.
		bound := gap + faultsuite.DefaultBound
		t.Logf("the pair took no connections for %s at most during the rolling restart; work stopped for %s at most (bound %s)",
			gap.Round(time.Millisecond), res.Pause.Round(time.Millisecond), bound.Round(time.Millisecond))
		if res.Pause > bound {
			failures = append(failures, fmt.Sprintf("work stopped for %s in the rolling restart, past %s (the pair's longest gap, %s, + %s)",
				res.Pause.Round(time.Millisecond), bound.Round(time.Millisecond), gap.Round(time.Millisecond), faultsuite.DefaultBound))
		}
		for _, f := range failures {
			t.Error(f)
		}
	})
}

// longestGap watches the pair until stop closes and returns the longest time in which
// no node took connections.
func (p *artemisPair) longestGap(stop <-chan struct{}) time.Duration {
	var longest time.Duration
	var down time.Time // when the current gap began; zero while a node serves
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return longest
		case now := <-tick.C:
			if _, err := p.active(); err == nil {
				down = time.Time{}
				continue
			}
			if down.IsZero() {
				down = now
			}
			longest = max(longest, now.Sub(down))
		}
	}
}

// artemisPublishThroughFailover publishes a stream, once each and without retries, while
// the active node is killed, and checks that every Publish that returned nil is on the
// broker afterwards (read from the node that took over); the publishes that failed in
// the failover are counted and reported, not retried.
func artemisPublishThroughFailover(t *testing.T, pair *artemisPair, form string) {
	n := 300
	if form == "full" {
		n = 3000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tr, err := transport.Open(ctx, pair.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	app, err := babelqueue.New(tr, babelqueue.WithQueue(fmt.Sprintf("bqfaults-pubfail-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	queue := app.Queue()
	confirmed := map[string]bool{}
	failed := 0
	var firstFail, lastFail time.Time
	for i := range n {
		if i == n/3 {
			_, moved, err := pair.kill()
			if err != nil {
				t.Fatal(err)
			}
			defer func(i int) {
				if f := <-moved; f.err == nil {
					t.Logf("killed node %d (active) after %d publishes; node %d active %s later", f.killed, i, 3-f.killed, f.took.Round(time.Millisecond))
				}
			}(i)
		}
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		id, err := app.Publish(pctx, faultsuite.URNGood, faultsuite.Payload{N: i, At: time.Now().UnixNano()})
		pcancel()
		if err != nil {
			if failed == 0 {
				firstFail = time.Now()
				t.Logf("first failed publish (#%d): %v", i, err)
			}
			failed++
			lastFail = time.Now()
			continue
		}
		confirmed[id] = true
		time.Sleep(5 * time.Millisecond)
	}
	// Read everything from the node that took over, before the other comes back.
	got := transporttest.DrainBodies(t, tr, queue, 64, 3*time.Second)
	missing, extra := 0, 0
	seen := map[string]bool{}
	for body := range got {
		id := ""
		if env, err := envelope.Decode([]byte(body)); err == nil {
			id = env.Meta.ID
		}
		seen[id] = true
		if !confirmed[id] {
			extra++ // a publish that failed but reached the broker
		}
	}
	for id := range confirmed {
		if !seen[id] {
			missing++
		}
	}
	outage := time.Duration(0)
	if failed > 0 {
		outage = lastFail.Sub(firstFail)
	}
	t.Logf("Artemis pair, publishes through a failover (%s form): %d published, %d returned nil, %d failed (over %s; not retried), "+
		"%d of those on the broker anyway; of the %d confirmed, %d missing",
		form, n, len(confirmed), failed, outage.Round(time.Millisecond), extra, len(confirmed), missing)
	if missing > 0 {
		t.Errorf("%d publishes that returned nil are not on the broker after the failover", missing)
	}
	if err := pair.up(); err != nil {
		t.Fatal(err)
	}
}
