package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kafkaNode is a private single-node KRaft Kafka the test starts, stops and starts again
// on its own loopback ports and data directory, so a restart never touches the broker
// other test suites share on 9092.
type kafkaNode struct {
	*brokerproc.Process
	dir   string // server.properties, data/, node.log
	port  int    // PLAINTEXT listener
	java  string
	jvm   []string
	props string
}

// startKafkaNode formats and starts a private Kafka from the distribution
// scripts/brokers.sh caches (${BQ_CACHE_DIR:-~/.cache/babelqueue}/kafka-<version>/libs).
// Without java or the cached class path the test skips, or fails under CI=true.
func startKafkaNode(t *testing.T) *kafkaNode {
	t.Helper()
	const hint = "; run `scripts/brokers.sh up kafka` (it installs java and caches the Kafka distribution)"
	java := os.Getenv("BQ_JAVA")
	if java == "" {
		var err error
		if java, err = exec.LookPath("java"); err != nil {
			brokerproc.Require(t, "kafka restart test: no java on PATH and BQ_JAVA unset%s", hint)
		}
	}
	cache := os.Getenv("BQ_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "/root"
		}
		cache = filepath.Join(home, ".cache", "babelqueue")
	}
	version := os.Getenv("BQ_KAFKA_VERSION")
	if version == "" {
		version = "4.1.1"
	}
	libs := filepath.Join(cache, "kafka-"+version, "libs")
	if jars, _ := filepath.Glob(filepath.Join(libs, "kafka_2.13-*.jar")); len(jars) == 0 {
		brokerproc.Require(t, "kafka restart test: no cached Kafka distribution in %s%s", libs, hint)
	}
	n := &kafkaNode{dir: t.TempDir(), port: brokerproc.FreePort(t), java: java}
	ctrl := brokerproc.FreePort(t, n.port)
	data := filepath.Join(n.dir, "data")
	// The shared broker's configuration (scripts/brokers/kafka-server.properties), on free
	// ports and a private data directory.
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "scripts", "brokers", "kafka-server.properties"))
	if err != nil {
		t.Fatal(err)
	}
	props := strings.NewReplacer("@PORT@", strconv.Itoa(n.port), "@CONTROLLER_PORT@", strconv.Itoa(ctrl),
		"@LOG_DIRS@", data, "@AUTO_CREATE@", "true").Replace(string(tmpl))
	n.props = filepath.Join(n.dir, "server.properties")
	if err := os.WriteFile(n.props, []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	n.jvm = []string{"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:MaxDirectMemorySize=64m", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dkafka.logs.dir=" + n.dir, "-cp", filepath.Join(libs, "*")}
	if l4j, err := filepath.Abs(filepath.Join("..", "..", "scripts", "brokers", "log4j2.properties")); err == nil {
		if _, err := os.Stat(l4j); err == nil {
			n.jvm = append([]string{"-Dlog4j2.configurationFile=" + l4j}, n.jvm...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	format := exec.CommandContext(ctx, java, append(slices.Clip(n.jvm), "kafka.tools.StorageTool", "format",
		"-t", "bqtest-restart-kafkaAA", "-c", n.props)...)
	if out, err := format.CombinedOutput(); err != nil {
		t.Fatalf("kafka storage format: %v\n%s", err, out)
	}
	n.Process = brokerproc.New(t, brokerproc.Config{
		Name: "private Kafka",
		Command: func() *exec.Cmd {
			cmd := exec.Command(n.java, append(slices.Clip(n.jvm), "kafka.Kafka", n.props)...)
			cmd.Dir = n.dir
			// Its own process group (a ^C of the test run does not reach it first), and
			// killed with the test process should that die without cleaning up.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		Log:   filepath.Join(n.dir, "node.log"),
		Ready: n.ready,
		Poll:  200 * time.Millisecond,
		// SIGTERM is a controlled shutdown; the JVM is killed if it has not exited
		// within 30s.
	})
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *kafkaNode) url(kv ...string) string {
	u := fmt.Sprintf("kafka://127.0.0.1:%d", n.port)
	for i := 0; i+1 < len(kv); i += 2 {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + kv[i] + "=" + kv[i+1]
	}
	return u
}

func (n *kafkaNode) seed() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// ready reports whether the broker's metadata lists a broker: the node is up.
func (n *kafkaNode) ready() error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.seed()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx)
	if err == nil && len(md.Brokers) == 0 {
		err = errors.New("no broker in the metadata")
	}
	return err
}

const (
	restartOK   = "urn:babel:restart:ok"
	restartFail = "urn:babel:restart:fail"
)

// TestBrokerRestartMidRun stops a private Kafka (SIGTERM, waiting for the JVM to exit)
// while the runtime publishes a steady stream, four workers handle it and every fifth
// message fails into retries and the dead-letter topic; then it starts the broker again
// on the same ports and data. Afterwards every message is accounted for as a user would
// check: each good one handled at least once (distinct ids), each failing one tried with
// attempts 0, 1, 2 and in <queue>.dlq with attempts 3, no good one dead-lettered, and the
// group's committed offsets at the end of every partition of the queue.
func TestBrokerRestartMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a private Kafka (about 30s)")
	}
	node := startKafkaNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := transporttest.UniqueName("bqtest-restart")
	dlq := q + ".dlq"
	group := transporttest.UniqueName("bqtest-restart")
	admCl, err := kgo.NewClient(kgo.SeedBrokers(node.seed()))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	for topic, parts := range map[string]int32{q: 3, dlq: 1} {
		resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}

	// The delivery timeout (2s) is shorter than the outage (about 4-10s), so settle writes
	// time out while the broker is away and are given up with the users' publishes buffered
	// behind them: those publishes must still arrive.
	// The transport's warnings (fetch errors, failed commits) and the runtime's errors
	// (failed settlements) go to the test log; dead-lettering each failing message is the
	// runtime's warning, expected here.
	tr, err := kafka.Open(ctx, node.url("group", group, "delivery_timeout", "2s"), kafka.WithLogger(brokerproc.TestLogger(t, slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_ = tr.Close(cctx)
	}()
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithLogger(brokerproc.TestLogger(t, slog.LevelError)),
		babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3), babelqueue.WithConcurrency(4),
		babelqueue.WithShutdownGrace(5*time.Second), babelqueue.WithSettleTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w := brokerproc.NewWorkload(q, restartFail, 3)
	type payload struct {
		N int `json:"n"`
	}
	babelqueue.Handle(a, restartOK, func(_ context.Context, p payload, m *babelqueue.Message) error {
		time.Sleep(2 * time.Millisecond) // the handler's work: deliveries are in flight when the broker stops
		w.Handled(p.N)
		if m.Attempts != 0 {
			w.Anomaly("good message %d handled with attempts %d", p.N, m.Attempts)
		}
		return nil
	})
	babelqueue.Handle(a, restartFail, func(_ context.Context, p payload, m *babelqueue.Message) error {
		return w.Refuse(p.N, m.Attempts)
	})
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(runCtx) }()
	stopApp := func() {
		stopRun()
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return within 60s of its context ending")
		}
	}
	defer stopRun()

	// The dead-letter topic, read from the start outside any group, as a user would.
	dlqCl, err := kgo.NewClient(kgo.SeedBrokers(node.seed()), kgo.ConsumeTopics(dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer dlqCl.Close()
	readDLQ := func(wait time.Duration) {
		pctx, pcancel := context.WithTimeout(ctx, wait)
		defer pcancel()
		dlqCl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if err := w.DeadLettered(r.Value); err != nil {
				t.Errorf("dead letter is not JSON: %v: %q", err, r.Value)
			}
		})
	}

	// The producer: a steady stream; the broker stops after the first 100 and the stream
	// goes on through the outage (buffered by the producer) and for a while after it.
	run := w.Produce(ctx, func(i int, failing bool) bool {
		urn := restartOK
		if failing {
			urn = restartFail
		}
		if _, err := a.Publish(ctx, urn, map[string]any{"n": i}); err != nil {
			t.Errorf("Publish %d: %v", i, err)
			return false
		}
		return true
	}, node.Stop, node.Start)
	// The producer, and the restart it started, end before the test does.
	defer func() { cancel(); run.Drain() }()

	complete := func() bool {
		select {
		case <-run.Published():
			return w.Accounted()
		default:
			return false
		}
	}
	for !complete() && ctx.Err() == nil {
		readDLQ(500 * time.Millisecond)
	}
	run.Wait(t)
	t.Logf("the broker took %s to stop and answered again %s after SIGTERM", run.StoppedIn.Round(time.Millisecond), run.DownFor.Round(time.Millisecond))
	// While the runtime still runs, its background commits catch up with everything
	// settled (what a lag monitor shows); then stop it (its consumer commits and leaves
	// the group) and read the dead-letter topic to its end.
	var behind []string
	for range 50 {
		if behind = groupBehind(t, adm, group, q); len(behind) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(behind) > 0 {
		t.Errorf("10s after every message was settled, the running group's commits still lag: %s", strings.Join(behind, ", "))
	}
	stopApp()
	readDLQ(2 * time.Second)

	tl := w.Tally(t, func(i int, tried map[int]bool) {
		for n := range 3 {
			if !tried[n] {
				t.Errorf("failing message %d was never handled with attempts %d (saw %v)", i, n, tried)
			}
		}
	})
	t.Logf("%d messages published (%d after the restart), %d handled (%d repeats), %d dead-lettered (%d duplicates)",
		tl.Total, run.AfterBack, tl.Handled, tl.Repeats, tl.Dead, tl.DeadDups)
	w.Verdict(t, tl)

	// After the runtime stopped, the group's committed offsets are at the end of every
	// partition of the queue.
	if behind := groupBehind(t, adm, group, q); len(behind) > 0 {
		t.Errorf("group %s does not cover the queue: %s", group, strings.Join(behind, ", "))
	}
}

// groupBehind lists the partitions of topic whose committed offset in group is not the
// partition's end offset. A partition that never held a record needs no commit: nothing
// was consumed from it, so "no offset" is its end.
func groupBehind(t *testing.T, adm *kadm.Client, group, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	var committed kadm.OffsetResponses
	err = whileCoordinatorMoves(ctx, func() (err error) {
		committed, err = adm.FetchOffsets(ctx, group)
		if err == nil {
			err = committed.Error()
		}
		return err
	})
	if err != nil {
		t.Fatalf("committed offsets of %s: %v", group, err)
	}
	var behind []string
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(-1)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok {
			at = c.At
		}
		if at != e.Offset && (at != -1 || e.Offset != 0) {
			behind = append(behind, fmt.Sprintf("%s[%d] committed %d of %d", e.Topic, e.Partition, at, e.Offset))
		}
	})
	slices.Sort(behind)
	return behind
}
