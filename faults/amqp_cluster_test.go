package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// Issue 35: the node failures of a three-node RabbitMQ cluster (scripts/brokers.sh up
// rabbitmq-cluster), quorum queues (queue_type=quorum), accounted by meta.id as every
// other run of the suite. The engine's restart scenario carries them: the binding's
// Stop is the fault, its Start the heal.
//
//   - leader kill: kill -9 of the node that leads the work queue (rabbitmqctl
//     list_queues name leader), mid-run; started again after the fault's time. Every
//     process connected to the first node of the URL, which declared the queue and so
//     leads it (client-local): the workers, the publisher and the dead-letter reader
//     all lose their connection and move on to the next node. The run measures the
//     broker's failover (until another node names itself the leader) and the
//     longest time no worker settled anything during the fault (the resume time), which
//     must stay within the failover plus 5 s.
//   - rolling restart: node 1, 2, then 3 stopped (rabbitmqctl shutdown) and started
//     again, each once the one before is back and the next one is not critical for a
//     queue's quorum (rabbitmq-queues check_if_node_is_quorum_critical), while the
//     stream is published and consumed.
//
// Both publish a third of the stream through the fault: every Publish that returned nil
// must be handled (or dead-lettered) afterwards, 0 missing.
const resumeSlack = 5 * time.Second

// rabbitCluster is a three-node cluster of the test's own, which it kills and restarts:
// scripts/brokers.sh's rabbitmq-cluster on other ports (AMQP 5791–5793, distribution
// 25791–25793), other node names (bqf1@localhost…) and a state directory of the test,
// so that the cluster the driver's tests use (BQ_AMQP_CLUSTER_URL) never loses a node
// under them. It is stopped when the test ends.
type rabbitCluster struct {
	url    string
	script string
	env    []string // the environment that makes scripts/brokers.sh address this cluster
}

func newRabbitCluster(t *testing.T) *rabbitCluster {
	transporttest.BrokerURL(t, "BQ_AMQP_URL", "rabbitmq") // the shared broker's presence says RabbitMQ is installed here
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		brokerproc.Require(t, "rabbitmq-server not found in %s; the test's cluster cannot be started", rabbitBin)
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "brokers.sh"))
	if err != nil {
		t.Fatal(err)
	}
	state := privateDir(t, "rabbitmq-cluster")
	enterable(t, state) // the nodes run as the rabbitmq user when the test runs as root
	c := &rabbitCluster{script: script, env: append(os.Environ(),
		"BQ_STATE_DIR="+state, "BQ_RMQC_AMQP_BASE=5790", "BQ_RMQC_DIST_BASE=25790", "BQ_RMQC_PREFIX=bqf")}
	ctx := context.Background()
	t.Cleanup(func() {
		if out, err := c.run(ctx, "down", "rabbitmq-cluster"); err != nil {
			t.Errorf("stopping the test's cluster: %v %s", err, out)
		}
	})
	began := time.Now()
	if _, err := c.run(ctx, "up", "rabbitmq-cluster"); err != nil {
		t.Fatalf("starting the test's cluster: %v", err)
	}
	t.Logf("the test's own three-node cluster up in %s", time.Since(began).Round(100*time.Millisecond))
	out, err := c.run(ctx, "env", "rabbitmq-cluster")
	if err != nil {
		t.Fatal(err)
	}
	_, c.url, _ = strings.Cut(strings.TrimSpace(out), "BQ_AMQP_CLUSTER_URL=")
	if c.url == "" {
		t.Fatalf("brokers.sh env rabbitmq-cluster printed %q", out)
	}
	return c
}

// run runs scripts/brokers.sh with args on the test's cluster and returns its standard
// output.
func (c *rabbitCluster) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Env = c.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("brokers.sh %v: %w: %s", args, err, strings.TrimSpace(errOut.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// node runs `scripts/brokers.sh node rabbitmq-cluster action args…` and returns its
// standard output.
func (c *rabbitCluster) node(ctx context.Context, action string, args ...string) (string, error) {
	return c.run(ctx, append([]string{"node", "rabbitmq-cluster", action}, args...)...)
}

// leader returns the number of the node that leads queue.
func (c *rabbitCluster) leader(ctx context.Context, queue string) (int, error) {
	out, err := c.node(ctx, "leader", queue)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

// firstNode is the cluster URL with only its first node.
func (c *rabbitCluster) firstNode() string {
	u, err := url.Parse(c.url)
	if err != nil {
		return c.url
	}
	u.Host, _, _ = strings.Cut(u.Host, ",")
	return u.String()
}

// deleteQueues deletes a run's quorum queues when the test ends: they live on every node.
func (c *rabbitCluster) deleteQueues(t *testing.T, queues ...string) {
	t.Cleanup(func() {
		conn, err := amqp091.Dial(c.firstNode())
		if err != nil {
			return
		}
		defer conn.Close()
		for _, q := range queues {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
	})
}

// clusterFault is what one scenario's binding measured, for the test's verdict.
type clusterFault struct {
	mu       sync.Mutex
	failover time.Duration // kill: from the kill until another node led the queue
	notes    []string
	err      error
}

func (f *clusterFault) notef(format string, args ...any) {
	f.mu.Lock()
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// binding is the cluster's binding: the workers open the cluster URL as RabbitMQ's
// (openWorker, by name), with queue_type=quorum; the test gives Stop and Start.
func (c *rabbitCluster) binding(t *testing.T, queue *string, prepared func(q string)) *faultsuite.Binding {
	raw := withParams(c.url, "queue_type", "quorum")
	return &faultsuite.Binding{
		Name: "RabbitMQ",
		URL:  func(faultsuite.Role, string) string { return raw },
		Prepare: func(_ context.Context, q, dlq string) error {
			*queue = q
			c.deleteQueues(t, q, dlq)
			if prepared != nil {
				prepared(q)
			}
			return nil
		},
		Settings: "quorum queues on three nodes (queue_type=quorum, the URL lists every node); publisher confirms on; " +
			"a lost connection is redialled to the next node in turn, the consumers resume by themselves",
	}
}

// leaderKill makes the binding's fault a kill -9 of the node leading the work queue.
// The leader and its Erlang VM's pid are looked up ahead, while the run goes on (the
// CLI takes seconds on a busy machine), so that the kill is instant when it comes.
func (c *rabbitCluster) leaderKill(t *testing.T, f *clusterFault) *faultsuite.Binding {
	var queue string
	var (
		mu        sync.Mutex
		victim    int // the leader, last looked up
		victimPid int
		stop      = make(chan struct{})
		known     = make(chan struct{})
		once      sync.Once
	)
	watch := func(q string) {
		go func() {
			for {
				if n, err := c.leader(context.Background(), q); err == nil {
					if out, err := c.node(context.Background(), "pid", strconv.Itoa(n)); err == nil {
						if pid, err := strconv.Atoi(out); err == nil {
							mu.Lock()
							victim, victimPid = n, pid
							mu.Unlock()
							once.Do(func() { close(known) })
						}
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	})
	b := c.binding(t, &queue, watch)
	var elected chan struct{}
	var killedAt time.Time
	var killed int // the node Stop killed
	b.Stop = func() error {
		select {
		case <-known:
		case <-time.After(60 * time.Second):
			return fmt.Errorf("the leader of %s was not known within 60s", queue)
		}
		close(stop)
		mu.Lock()
		n, pid := victim, victimPid
		mu.Unlock()
		killed, killedAt = n, time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill -9 %d (node %d): %w", pid, n, err)
		}
		ctx := context.Background()
		f.notef("killed node %d (kill -9 of its Erlang VM, pid %d), the leader of %s", n, pid, queue)
		elected = make(chan struct{})
		go func() { // the broker's failover: until another node leads the queue
			defer close(elected)
			defer func() { // then its start script and pid file
				if _, err := c.node(ctx, "kill", strconv.Itoa(n)); err != nil {
					f.notef("cleaning up node %d: %v", n, err)
				}
			}()
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if m, err := c.leader(ctx, queue); err == nil && m != n {
					f.mu.Lock()
					f.failover = time.Since(killedAt)
					f.mu.Unlock()
					f.notef("node %d leads %s %s after the kill", m, queue, time.Since(killedAt).Round(time.Millisecond))
					return
				}
			}
			f.mu.Lock()
			f.err = fmt.Errorf("no other node led %s within 60s of the kill", queue)
			f.mu.Unlock()
		}()
		return nil
	}
	b.Start = func() error {
		<-elected
		f.notef("node %d down %s when started again", killed, time.Since(killedAt).Round(time.Millisecond))
		_, err := c.node(context.Background(), "start", strconv.Itoa(killed))
		return err
	}
	b.RestartMethod = "kill -9 of the node leading the quorum queue (rabbitmqctl list_queues name leader), started again once another node leads it; " +
		"every client was connected to it"
	return b
}

// rollingRestart makes the binding's fault a rolling restart of the three nodes, made
// while the run goes on: Stop starts it, Start waits for its end.
func (c *rabbitCluster) rollingRestart(t *testing.T, f *clusterFault) *faultsuite.Binding {
	var queue string
	b := c.binding(t, &queue, nil)
	var done chan error
	b.Stop = func() error {
		done = make(chan error, 1)
		go func() { done <- c.roll(f) }()
		return nil
	}
	b.Start = func() error { return <-done }
	b.RestartMethod = "rolling restart: nodes 1, 2, 3 stopped (rabbitmqctl shutdown) and started again in turn, each once the one before " +
		"is back and it is not critical for a queue's quorum, while the stream goes on"
	return b
}

// roll restarts every node in turn.
func (c *rabbitCluster) roll(f *clusterFault) error {
	ctx := context.Background()
	for n := 1; n <= 3; n++ {
		began := time.Now()
		for !c.safe(ctx, n) {
			if time.Since(began) > 2*time.Minute {
				return fmt.Errorf("node %d still critical for a quorum after 2m", n)
			}
			time.Sleep(200 * time.Millisecond)
		}
		waited := time.Since(began)
		if _, err := c.node(ctx, "stop", strconv.Itoa(n)); err != nil {
			return err
		}
		stopped := time.Now()
		if _, err := c.node(ctx, "start", strconv.Itoa(n)); err != nil {
			return err
		}
		f.notef("node %d: quorum-safe after %s, stopped in %s, back in %s",
			n, waited.Round(time.Millisecond), stopped.Sub(began.Add(waited)).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	}
	return nil
}

func (c *rabbitCluster) safe(ctx context.Context, n int) bool {
	_, err := c.node(ctx, "safe", strconv.Itoa(n))
	return err == nil
}

// TestClusterFaultsRabbitMQ runs the node failures on the cluster: the short form in
// make test, the full form (BQ_FAULTS=full) in make faults. BQ_FAULTS_ONLY and
// BQ_FAULTS_SCENARIOS select it as they select TestFaults' runs ("rabbitmq-cluster";
// "leader-kill", "rolling-restart", "publish-after-election").
func TestClusterFaultsRabbitMQ(t *testing.T) {
	if !selected("BQ_FAULTS_ONLY", "rabbitmq-cluster") {
		t.Skip("not selected by BQ_FAULTS_ONLY")
	}
	parallelShort(t) // the cluster is this test's own
	c := newRabbitCluster(t)
	for _, sc := range []struct {
		slug string
		bind func(*testing.T, *clusterFault) *faultsuite.Binding
		// span is how long a third of the stream lasts (short form, full form): while
		// the third published through the fault lasts, the consumers always have work,
		// so a pause in their settlements is theirs, not an empty queue's.
		span, fullSpan time.Duration
	}{
		{"leader-kill", c.leaderKill, 14 * time.Second, 30 * time.Second},
		{"rolling-restart", c.rollingRestart, 12 * time.Second, 40 * time.Second},
	} {
		t.Run(sc.slug, func(t *testing.T) {
			if !selected("BQ_FAULTS_SCENARIOS", sc.slug) {
				t.Skip("not selected by BQ_FAULTS_SCENARIOS")
			}
			f := &clusterFault{}
			b := sc.bind(t, f)
			p, span := faultsuite.Short(faultsuite.Restart), sc.span
			if full() {
				p, span = faultsuite.Full(faultsuite.Restart), sc.fullSpan
			}
			p.Rate = max(1, int(float64(p.Messages/3)/span.Seconds()))
			// Handlers that take as long as the workers can keep up with: the faults land
			// on deliveries in flight, whose settlements the lost connections fail.
			p.HandlerDelay = time.Duration(float64(p.Workers*p.Concurrency)/float64(p.Rate)*float64(time.Second)) / 2
			// The node is started again a second after the kill (Start waits for the
			// failover first), and takes seconds to boot: down for its boot time. A
			// fault the workers neither saw nor paused for half of that would not bite.
			p.Down = time.Second
			dir := os.Getenv("BQ_FAULTS_LOGS")
			if dir == "" {
				dir = t.TempDir()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			res, err := faultsuite.Run(ctx, b, p, faultsuite.Env{Spawn: spawnWorker, Logf: t.Logf, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			recordCluster(t, res, "RabbitMQ", "3 nodes, quorum queues", "")
			for _, n := range append(f.notes, res.Notes...) {
				t.Log("  " + n)
			}
			t.Logf("RabbitMQ cluster, %s: published %d, handled %d, dead-lettered %d, missing %d, duplicates %d, publishes retried %d; "+
				"failed settlements %v, failed receives %d; longest pause %s; fault lasted %s; recovery after it %s; took %.1fs",
				sc.slug, res.Published, res.Handled, res.DeadLettered, res.Missing, res.Duplicates, res.PublishRetries,
				res.FailedSettles, res.ReceiveErrors, res.Pause.Round(time.Millisecond), res.Down.Round(time.Millisecond),
				res.Recovery.Round(time.Millisecond), res.Elapsed)
			for _, fail := range res.Failures(2) {
				t.Error(fail)
			}
			if f.err != nil {
				t.Error(f.err)
			}
			continuous := res.Down < span
			if !continuous {
				t.Logf("the fault (%s) outlasted the third of the stream published through it (%s): the longest pause includes an empty queue's",
					res.Down.Round(time.Millisecond), span)
			}
			if sc.slug == "leader-kill" && f.err == nil {
				bound := f.failover + resumeSlack
				t.Logf("| RabbitMQ | kill -9 of the quorum queue's leader | %d | %d | %d | %d | failover %s; resumed within %s (bound %s) |",
					res.Published, res.Missing, res.Duplicates, res.PublishRetries,
					f.failover.Round(time.Millisecond), res.Pause.Round(time.Millisecond), bound.Round(time.Millisecond))
				if continuous && res.Pause > bound {
					t.Errorf("no worker settled anything for %s during the fault, past the failover (%s) plus %s",
						res.Pause.Round(time.Millisecond), f.failover.Round(time.Millisecond), resumeSlack)
				}
			} else {
				pause := "longest pause " + res.Pause.Round(time.Millisecond).String()
				if !continuous {
					pause = "no pause measured"
				}
				t.Logf("| RabbitMQ | rolling restart of the 3 nodes | %d | %d | %d | %d | restart took %s; %s |",
					res.Published, res.Missing, res.Duplicates, res.PublishRetries, res.Down.Round(time.Millisecond), pause)
			}
		})
	}
	t.Run("publish-after-election", func(t *testing.T) {
		if !selected("BQ_FAULTS_SCENARIOS", "publish-after-election") {
			t.Skip("not selected by BQ_FAULTS_SCENARIOS")
		}
		c.publishAfterElection(t)
	})
}

// nodesFrom is the cluster URL with node n (1–3) first, then the others in turn.
func (c *rabbitCluster) nodesFrom(n int) string {
	u, err := url.Parse(c.url)
	if err != nil {
		return c.url
	}
	hosts := strings.Split(u.Host, ",")
	k := (n - 1) % len(hosts)
	u.Host = strings.Join(append(hosts[k:], hosts[:k]...), ",")
	return u.String()
}

// publishAfterElection kills the node leading a quorum queue, leaves it down, and
// publishes to the queue from the instant of the kill through a transport connected to
// that node, which redials the next one: the publishes made on the new connection while
// the queue has no leader are nacked, and once another node was elected they must be
// confirmed again. A confirm channel that carried a nacked write went on nacking until
// the old leader was back (RabbitMQ 3.10), so a publisher that reused it failed for as
// long as the node was down.
func (c *rabbitCluster) publishAfterElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	q := transporttest.UniqueName("bqfaults-election")
	c.deleteQueues(t, q)
	conn, err := amqp091.Dial(c.firstNode()) // client-local: node 1 leads the queue
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(q, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	}
	_ = conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.leader(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.node(ctx, "pid", strconv.Itoa(leader))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("pid of node %d: %q", leader, out)
	}
	pub, err := transport.Open(ctx, withParams(c.nodesFrom(leader), "queue_type", "quorum"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(context.Background()) }()
	publish := func() error {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		return pub.Publish(pctx, &transport.Message{Queue: q, Body: []byte(`{}`)})
	}
	if err := publish(); err != nil { // connected to the leader before the kill
		t.Fatal(err)
	}
	t.Cleanup(func() { // the node back for the scenarios after this one
		if _, err := c.node(context.Background(), "kill", strconv.Itoa(leader)); err != nil {
			t.Errorf("cleaning up node %d: %v", leader, err)
		}
		if _, err := c.node(context.Background(), "start", strconv.Itoa(leader)); err != nil {
			t.Errorf("starting node %d again: %v", leader, err)
		}
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	nacked := 0
	for {
		err := publish()
		if err == nil {
			break
		}
		if !errors.Is(err, transport.ErrNotConfirmed) {
			t.Fatalf("publish %s after the kill: %v", time.Since(killedAt).Round(time.Millisecond), err)
		}
		nacked++
		if time.Since(killedAt) > 30*time.Second {
			t.Fatalf("no publish confirmed within 30s of the kill of node %d, the leader, which stays down (%d nacked): %v", leader, nacked, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("node %d (the leader) killed; %d publishes nacked, then one confirmed %s after the kill",
		leader, nacked, time.Since(killedAt).Round(time.Millisecond))
	if nacked == 0 {
		t.Log("another node was elected before the first publish after the kill: this run saw no nack")
	}
}

// enterable makes dir, and the directories above it that the test made, enterable by
// every user (0755): a broker that runs as another user (RabbitMQ runs as the rabbitmq
// user when the test runs as root) must reach its data directory, and t.TempDir and
// os.MkdirTemp make theirs 0700 — rabbitmq-server could not even be started in it
// ("fork/exec …/rabbitmq-server: permission denied": the chdir into it failed).
func enterable(t *testing.T, dir string) {
	t.Helper()
	top := os.TempDir()
	if d := os.Getenv("BQ_FAULTS_LOGS"); d != "" && strings.HasPrefix(dir, filepath.Clean(d)+string(filepath.Separator)) {
		top = filepath.Clean(d)
	}
	for d := dir; strings.HasPrefix(d, top+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
