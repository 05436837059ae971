package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kafkaFailover is how long the cluster takes to move the leadership of a killed node's
// partitions: the controller fences a broker whose heartbeats stopped after
// broker.session.timeout.ms (Kafka's default, 9 s), then elects new leaders from the
// in-sync replicas. Work must resume within it plus faultsuite.DefaultBound.
const kafkaFailover = 9 * time.Second

// kafkaCluster is the three-node cluster of scripts/brokers.sh (kafka-cluster), its
// nodes controlled through `scripts/brokers.sh node kafka-cluster …`.
type kafkaCluster struct {
	t     *testing.T
	raw   string
	seeds []string
	adm   *kadm.Client
	cl    *kgo.Client
}

func newKafkaCluster(t *testing.T) *kafkaCluster {
	raw := transporttest.BrokerURL(t, "BQ_KAFKA_CLUSTER_URL", "kafka-cluster")
	brokerproc.LockCluster(t, "kafka-cluster")
	seeds := strings.Split(parseURL(t, raw).Host, ",")
	// Retried every 100 ms (franz-go's backoff goes to seconds): a metadata request that
	// meets the dead node is made again on another at once, so the failover it sees is
	// the cluster's, not the admin client's.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.RequestTimeoutOverhead(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	k := &kafkaCluster{t: t, raw: raw, seeds: seeds, adm: kadm.NewClient(cl), cl: cl}
	if err := k.healthy(context.Background(), "", 2*time.Minute); err != nil {
		t.Fatalf("the cluster is not healthy before the test: %v", err)
	}
	return k
}

// node runs `scripts/brokers.sh node kafka-cluster <args>` and returns its output.
func (k *kafkaCluster) node(args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join("..", "scripts", "brokers.sh"), "node", "kafka-cluster"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("brokers.sh node kafka-cluster %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// healthy waits until all three nodes are in the cluster's metadata and every
// partition of topic (none when empty) has a leader and three in-sync replicas.
func (k *kafkaCluster) healthy(ctx context.Context, topic string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		last = k.checkHealthy(ctx, topic)
		if last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return last
}

func (k *kafkaCluster) checkHealthy(ctx context.Context, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var topics []string
	if topic != "" {
		topics = []string{topic}
	}
	md, err := k.adm.Metadata(ctx, topics...)
	if err != nil {
		return err
	}
	if len(md.Brokers) != 3 {
		return fmt.Errorf("%d brokers in the metadata", len(md.Brokers))
	}
	for _, td := range md.Topics {
		if td.Err != nil {
			return fmt.Errorf("topic %s: %w", td.Topic, td.Err)
		}
		for _, p := range td.Partitions {
			if p.Leader < 0 || len(p.ISR) != 3 {
				return fmt.Errorf("%s/%d: leader %d, in-sync replicas %v", td.Topic, p.Partition, p.Leader, p.ISR)
			}
		}
	}
	return nil
}

// leaders returns the leader of each partition of topic.
func (k *kafkaCluster) leaders(ctx context.Context, topic string) (map[int32]int32, error) {
	md, err := k.adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int32{}
	for _, p := range md.Topics[topic].Partitions {
		out[p.Partition] = p.Leader
	}
	return out, nil
}

// createLedBy creates topic with partitions partitions of three replicas, node leader
// the first (preferred) replica of each: every partition led by that node.
func (k *kafkaCluster) createLedBy(ctx context.Context, topic string, partitions int, leader int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	for p := range partitions {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition = int32(p)
		a.Replicas = []int32{leader}
		for n := int32(1); n <= 3; n++ {
			if n != leader {
				a.Replicas = append(a.Replicas, n)
			}
		}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return err
	}
	for _, r := range resp.Topics {
		if err := kerrOf(r.ErrorCode, r.ErrorMessage); err != nil {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	// The shell's reading of the metadata (scripts/brokers.sh node kafka-cluster leader)
	// names the same leader: the fault suite and an operator see one cluster.
	return k.waitLeader(ctx, topic, leader)
}

func (k *kafkaCluster) waitLeader(ctx context.Context, topic string, leader int32) error {
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ls, err := k.leaders(ctx, topic)
		if err != nil {
			last = err
			continue
		}
		if ls[0] != leader {
			last = fmt.Errorf("%s/0 led by %d, want %d", topic, ls[0], leader)
			continue
		}
		out, err := k.node("leader", topic, "0")
		if err != nil {
			last = err
			continue
		}
		if out != strconv.Itoa(int(leader)) {
			return fmt.Errorf("brokers.sh node kafka-cluster leader %s says %q, the metadata %d", topic, out, leader)
		}
		return nil
	}
	return last
}

func kerrOf(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	s := fmt.Sprintf("error code %d", code)
	if msg != nil {
		s += ": " + *msg
	}
	return errors.New(s)
}

// kill kills node n with SIGKILL; start starts it again on its data and waits until it
// is back in the cluster (topic's partitions fully replicated again, when given).
func (k *kafkaCluster) kill(n int32) error {
	_, err := k.node("kill", strconv.Itoa(int(n)))
	return err
}

func (k *kafkaCluster) start(n int32, topic string) error {
	if _, err := k.node("start", strconv.Itoa(int(n))); err != nil {
		return err
	}
	return k.back(n, topic)
}

// back waits until node n, started again, is back in the cluster (topic's partitions,
// every topic's when empty, fully replicated again).
func (k *kafkaCluster) back(n int32, topic string) error {
	// Node n itself answers first: the metadata of the other nodes may still list it,
	// in sync, for a few seconds after it stopped (a controller that stopped before it
	// recorded its own broker's shutdown).
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := k.cl.Broker(int(n)).Request(ctx, kmsg.NewPtrMetadataRequest())
		cancel()
		if err == nil && len(resp.(*kmsg.MetadataResponse).Brokers) == 3 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d does not answer: %v", n, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return k.healthy(context.Background(), topic, time.Until(deadline))
}

// stop stops node n gracefully (a controlled shutdown: its leaderships move first).
func (k *kafkaCluster) stop(n int32) error {
	_, err := k.node("stop", strconv.Itoa(int(n)))
	return err
}

// victim picks the node the run kills: a different one each run, so the suite's runs
// also kill the active controller and the group coordinators in turn.
func victim() int32 { return int32(time.Now().UnixNano()%3) + 1 }

// clusterBinding is the Kafka binding on the cluster: the queue's four partitions all
// led by node leader (three replicas each), its dead-letter topic replicated three
// times; Stop and Start are the scenario's node fault.
func (k *kafkaCluster) binding(leader int32) *faultsuite.Binding {
	b := kafkaBinding(k.t, k.raw)
	b.Name = "Kafka" // the workers open it with the Kafka binding's opener: the URL as it is
	b.Prepare = func(ctx context.Context, queue, dlq string) error {
		if err := k.createLedBy(ctx, queue, 4, leader); err != nil {
			return err
		}
		return k.createLedBy(ctx, dlq, 1, leader)
	}
	return b
}

// TestClusterFaultsKafka runs the node failures of issue 35 on the three-node cluster,
// every meta.id accounted for: the node leading the work topic killed with SIGKILL
// mid-run (resume within the failover plus 5 s), publishes made through that failover
// (every Publish that returned nil is on the topic afterwards), and in the full form a
// rolling restart of every node while producing and consuming.
func TestClusterFaultsKafka(t *testing.T) {
	parallelShort(t) // newKafkaCluster takes the shared cluster's lock
	k := newKafkaCluster(t)
	logDir := t.TempDir()
	slack := 2.0
	if full() {
		slack = 1.0
	}
	report := func(t *testing.T, res *faultsuite.Result, scenario string, failures []string) {
		res.Broker, res.Scenario = "Kafka (3 nodes)", faultsuite.Scenario(scenario)
		t.Logf("%s, %s: published %d, handled %d, dead-lettered %d, missing %d, duplicates %d; longest pause in the fault %s; "+
			"recovery after the node was back %s (%s); fault lasted %s; failed settlements %v, failed receives %d, publish retries %d; took %.1fs",
			res.Broker, res.Scenario, res.Published, res.Handled, res.DeadLettered, res.Missing, res.Duplicates,
			res.Pause.Round(time.Millisecond), res.Recovery.Round(time.Millisecond), res.RecoveryOf, res.Down.Round(time.Millisecond),
			res.FailedSettles, res.ReceiveErrors, res.PublishRetries, res.Elapsed)
		for _, n := range res.Notes {
			t.Log("  " + n)
		}
		for _, f := range failures {
			t.Error(f)
		}
		recordCluster(t, res, "Kafka", "3 nodes", scenario)
	}
	env := faultsuite.Env{Spawn: spawnWorker, Logf: t.Logf, Dir: logDir}

	t.Run("leader-kill", func(t *testing.T) {
		// The node stays dead past the failover (Down), and publishing goes on through
		// all of it: the stream's second third (10 s at 40 a second, 12.5 s at 80)
		// plus the failover it waits through outlasts Down, so the longest pause in
		// the fault is how long the work stopped, not a queue with nothing to do.
		plan := faultsuite.Short(faultsuite.Restart)
		plan.Messages, plan.Rate, plan.Down = 1200, 40, 15*time.Second
		if full() {
			plan.Messages, plan.Rate, plan.Down, plan.Drain = 3000, 80, 20*time.Second, 3*time.Minute
		}
		leader := victim()
		b := k.binding(leader)
		queue := make(chan string, 1)
		b.Prepare = func(prepare func(context.Context, string, string) error) func(context.Context, string, string) error {
			return func(ctx context.Context, q, dlq string) error { queue <- q; return prepare(ctx, q, dlq) }
		}(b.Prepare)
		// The failover: from the kill until the metadata names another leader of the
		// work topic's partitions.
		// The engine's fault begins when it calls Stop, the kill when the node is gone
		// (the script takes a second or two): killDelay apart. The work goes on in
		// between, so the longest pause it measures is at most killDelay longer than
		// the stall after the kill.
		moved := make(chan failover, 1)
		var killDelay time.Duration
		b.Stop = func() error {
			q := <-queue
			t0 := time.Now()
			if err := k.kill(leader); err != nil {
				return err
			}
			killed := time.Now()
			killDelay = killed.Sub(t0)
			go func() { moved <- k.waitFailover(q, leader, killed) }()
			return nil
		}
		// Started again without waiting for it to catch up (the stream must not
		// outrun the fault); the cluster is checked whole after the run.
		b.Start = func() error { _, err := k.node("start", strconv.Itoa(int(leader))); return err }
		b.RestartMethod = fmt.Sprintf("SIGKILL of node %d, the leader of every partition of the work and dead-letter topics "+
			"(three replicas each, min.insync.replicas=2), started again on its data %s later", leader, plan.Down)
		b.Settings = "the cluster URL naming the three nodes; acks=all and idempotent writes (franz-go's defaults); " +
			"broker.session.timeout.ms=9s (Kafka's default): the controller moves the dead node's leaderships after it; " +
			"the publisher uses confirm=1"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		res, err := faultsuite.Run(ctx, b, plan, env)
		if err != nil {
			t.Fatal(err)
		}
		f := <-moved
		res.Notes = append(res.Notes, f.note)
		failures := withoutNoBite(res.Failures(slack))
		// The node fault's bound is on the pause it makes, not on the recovery after
		// the node is back (the cluster worked on without it).
		res.Notes = append(res.Notes, fmt.Sprintf("the kill took %s from the fault's start (the longest pause may include it)", killDelay.Round(time.Millisecond)))
		if bound := killDelay + resumeBound(f, slack); res.Pause > bound {
			failures = append(failures, fmt.Sprintf("work stopped for %s after the fault began, past %s (the kill, %s, the failover, %s, + %s)",
				res.Pause.Round(time.Millisecond), bound, killDelay.Round(time.Millisecond), f.took.Round(time.Millisecond), faultsuite.DefaultBound))
		}
		report(t, res, "leader SIGKILL", failures)
		if err := k.back(leader, ""); err != nil {
			t.Fatalf("the cluster did not heal: %v", err)
		}
	})

	t.Run("publish-failover", func(t *testing.T) { kafkaPublishThroughFailover(t, k, slack) })

	if !full() {
		return
	}
	t.Run("rolling-restart", func(t *testing.T) {
		// The second third of the stream (1,500 messages at 25 a second, a minute) is
		// published while the nodes restart (about 35 s on an idle machine), so the
		// longest pause in the fault is a stall, not a queue with nothing to do.
		plan := faultsuite.Full(faultsuite.Restart)
		plan.Messages, plan.Rate, plan.Down = 4500, 25, 30*time.Second
		b := k.binding(victim())
		var (
			done    = make(chan error, 1)
			restart []string
		)
		b.Stop = func() error {
			go func() {
				for n := int32(1); n <= 3; n++ {
					t0 := time.Now()
					if err := k.stop(n); err != nil {
						done <- err
						return
					}
					stopped := time.Since(t0)
					if err := k.start(n, ""); err != nil { // every topic in sync again, the work topic and __consumer_offsets among them
						done <- err
						return
					}
					restart = append(restart, fmt.Sprintf("node %d stopped in %s, back in sync %s later", n,
						stopped.Round(time.Millisecond), (time.Since(t0)-stopped).Round(time.Millisecond)))
				}
				done <- nil
			}()
			return nil
		}
		b.Start = func() error { return <-done }
		b.RestartMethod = "a rolling restart: each node in turn stopped with SIGTERM (a controlled shutdown) and started " +
			"again on its data, the next once every partition of every topic had three in-sync replicas again"
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		res, err := faultsuite.Run(ctx, b, plan, env)
		if err != nil {
			t.Fatal(err)
		}
		res.Notes = append(res.Notes, restart...)
		report(t, res, "rolling restart", withoutNoBite(res.Failures(slack)))
	})
}

// withoutNoBite drops the engine's "the fault did not bite" from failures: a node
// fault on a cluster is meant not to bite a consumer (franz-go retries on the new
// leader without an error reaching the runtime), and the leader kill proves its bite
// by the failover it waits for (waitFailover).
func withoutNoBite(failures []string) []string {
	return slices.DeleteFunc(failures, func(f string) bool { return strings.Contains(f, "the fault did not bite") })
}

// failover is the broker's own failover after a kill: how long until the cluster's
// metadata named other leaders for the dead node's partitions.
type failover struct {
	took time.Duration
	note string
}

// waitFailover waits until every partition of topic has a leader other than dead, and
// says how long after killed (when the kill was done) that was.
func (k *kafkaCluster) waitFailover(topic string, dead int32, killed time.Time) failover {
	for time.Since(killed) < 2*time.Minute {
		ls, err := k.leaders(context.Background(), topic)
		moved := err == nil && len(ls) > 0
		for _, l := range ls {
			moved = moved && l >= 0 && l != dead
		}
		if moved {
			took := time.Since(killed)
			return failover{took, fmt.Sprintf("the cluster's metadata named new leaders for node %d's partitions %s after the kill (leaders %v)",
				dead, took.Round(time.Millisecond), ls)}
		}
		time.Sleep(100 * time.Millisecond)
	}
	k.t.Errorf("the leaderships of node %d never moved", dead)
	return failover{2 * time.Minute, "the leaderships never moved"}
}

// resumeBound is how long work may stop after a kill: the cluster's failover as
// measured, plus faultsuite.DefaultBound, times slack.
func resumeBound(f failover, slack float64) time.Duration {
	return time.Duration(float64(f.took+faultsuite.DefaultBound) * slack)
}

// kafkaPublishThroughFailover publishes with confirm=1 from four goroutines to a topic
// led by one node, kills that node with SIGKILL two seconds in, publishes on through
// the failover, and then reads the topic from its start: every publish that returned
// nil must be there (a publish that failed may or may not be; it is counted).
func kafkaPublishThroughFailover(t *testing.T, k *kafkaCluster, slack float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	leader := victim()
	topic := transporttest.UniqueName("bqfaults-pubfail")
	if err := k.createLedBy(ctx, topic, 1, leader); err != nil {
		t.Fatal(err)
	}
	// franz-go's warnings of the dead node (one a refused dial) to the test log at -v.
	quiet := transport.ContextWithLogger(ctx, brokerproc.TestLogger(t, slog.LevelError))
	pub, err := transport.Open(quiet, withParams(k.raw, "confirm", "1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_ = pub.Close(cctx)
	}()
	app, err := babelqueue.New(pub, babelqueue.WithQueue(topic))
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu               sync.Mutex
		acked            = map[string]bool{}
		failed           = map[string]bool{}
		lastAck, killAt  time.Time
		longestStall     time.Duration
		slowest          time.Duration
		stopAt           = time.Now().Add(2*time.Second + 2*kafkaFailover)
		wg               sync.WaitGroup
		publishedAfterKi int
	)
	lastAck = time.Now()
	for w := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stopAt); i++ {
				m, err := app.Prepare(ctx, faultsuite.URNGood, faultsuite.Payload{N: w*100000 + i, At: time.Now().UnixNano()})
				if err != nil {
					t.Error(err)
					return
				}
				id := m.Projection.MessageID
				t0 := time.Now()
				err = pub.Publish(ctx, m)
				now := time.Now()
				mu.Lock()
				slowest = max(slowest, now.Sub(t0))
				if err != nil {
					failed[id] = true
				} else {
					acked[id] = true
					longestStall = max(longestStall, now.Sub(lastAck))
					lastAck = now
					if !killAt.IsZero() && t0.After(killAt) {
						publishedAfterKi++
					}
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	killAt = time.Now()
	mu.Unlock()
	if err := k.kill(leader); err != nil {
		t.Fatal(err)
	}
	f := k.waitFailover(topic, leader, time.Now())
	wg.Wait()
	restarted := time.Now()
	if err := k.start(leader, topic); err != nil {
		t.Fatalf("node %d did not come back: %v", leader, err)
	}
	t.Logf("node %d back in sync %s after its start", leader, time.Since(restarted).Round(time.Millisecond))

	// Read the topic from its start to its end, on a client of its own.
	seen := map[string]int{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end := ends[topic][0].Offset
	for read := int64(0); read < end && ctx.Err() == nil; {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			read = r.Offset + 1
			for _, h := range r.Headers {
				if h.Key == "bq-message-id" {
					seen[string(h.Value)]++
				}
			}
		})
	}
	var missing []string
	dups := 0
	for id := range acked {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	for _, n := range seen {
		dups += n - 1
	}
	failedThere := 0
	for id := range failed {
		if seen[id] > 0 {
			failedThere++
		}
	}
	slices.Sort(missing)
	t.Logf("Kafka (3 nodes), publishes through a failover: node %d (the topic's leader) killed with SIGKILL 2 s in; "+
		"%d publishes returned nil (%d of them begun after the kill), %d failed (%d of those on the topic all the same); "+
		"%d records on the topic; missing %d, duplicates %d; longest time without an acknowledged publish %s, slowest publish %s; %s",
		leader, len(acked), publishedAfterKi, len(failed), failedThere, end, len(missing), dups,
		longestStall.Round(time.Millisecond), slowest.Round(time.Millisecond), f.note)
	if len(missing) > 0 {
		t.Errorf("%d publishes that returned nil are not on the topic: %v", len(missing), missing[:min(len(missing), 10)])
	}
	if publishedAfterKi == 0 {
		t.Errorf("no publish begun after the kill returned nil: the failover never completed")
	}
	if bound := resumeBound(f, slack); longestStall > bound {
		t.Errorf("publishes stalled for %s, past %s (the failover, %s, + %s)", longestStall.Round(time.Millisecond), bound,
			f.took.Round(time.Millisecond), faultsuite.DefaultBound)
	}
}
