package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kafkaNode is a private single-node KRaft Kafka the test starts, stops and starts again
// on its own loopback ports and data directory, so a restart never touches the broker
// other test suites share on 9092.
type kafkaNode struct {
	dir   string // server.properties, data/, node.log
	port  int    // PLAINTEXT listener
	java  string
	jvm   []string
	props string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// requireOrSkip fails the test under CI=true, skips it elsewhere.
func requireOrSkip(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: integration tests never skip)", msg)
	}
	t.Skip(msg)
}

// kafkaFreePort returns a loopback port nobody listens on right now.
func kafkaFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
			requireOrSkip(t, "kafka restart test: no java on PATH and BQ_JAVA unset%s", hint)
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
		requireOrSkip(t, "kafka restart test: no cached Kafka distribution in %s%s", libs, hint)
	}
	n := &kafkaNode{dir: t.TempDir(), port: kafkaFreePort(t), java: java}
	ctrl := kafkaFreePort(t)
	for ctrl == n.port {
		ctrl = kafkaFreePort(t)
	}
	data := filepath.Join(n.dir, "data")
	// As scripts/brokers/kafka.sh writes it, on free ports and a private data directory.
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%[3]s
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
log.segment.bytes=67108864
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
`, n.port, ctrl, data)
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
	t.Cleanup(n.stop)
	if err := n.start(); err != nil {
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

// start starts the broker on the node's ports and data directory and waits until its
// metadata lists a broker. It does not call t.Fatal, so a test may restart the node
// from another goroutine.
func (n *kafkaNode) start() error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.java, append(slices.Clip(n.jvm), "kafka.Kafka", n.props)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = n.dir, logf, logf
	// Its own process group (a ^C of the test run does not reach it first), and killed
	// with the test process should that die without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()

	cl, err := kgo.NewClient(kgo.SeedBrokers(n.seed()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		md, err := adm.Metadata(ctx)
		cancel()
		if err == nil && len(md.Brokers) > 0 {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(n.dir, "node.log"))
			return fmt.Errorf("private Kafka exited during start-up:\n%s", kafkaTail(log, 3000))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("private Kafka did not answer within 90s")
		}
	}
}

// stop sends SIGTERM (a controlled shutdown) and waits for the JVM to exit; it kills
// the JVM after 30s.
func (n *kafkaNode) stop() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func kafkaTail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// restartLogger writes level and above to the test log (everything with BQ_TEST_DEBUG=1).
func restartLogger(t *testing.T, level slog.Level) *slog.Logger {
	if os.Getenv("BQ_TEST_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(restartWriter{t}, &slog.HandlerOptions{Level: level}))
}

type restartWriter struct{ t *testing.T }

func (w restartWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// restartDeadLetter is what the test reads of a dead-lettered body.
type restartDeadLetter struct {
	Job      string `json:"job"`
	Attempts int    `json:"attempts"`
	Data     struct {
		N int `json:"n"`
	} `json:"data"`
	DeadLetter *struct {
		Reason        string `json:"reason"`
		OriginalQueue string `json:"original_queue"`
		Attempts      int    `json:"attempts"`
		Error         string `json:"error"`
	} `json:"dead_letter"`
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

	// The transport's warnings (fetch errors, failed commits) and the runtime's errors
	// (failed settlements) go to the test log; dead-lettering each failing message is the
	// runtime's warning, expected here.
	tr, err := kafka.Open(ctx, node.url("group", group, "delivery_timeout", "5s"), kafka.WithLogger(restartLogger(t, slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_ = tr.Close(cctx)
	}()
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithLogger(restartLogger(t, slog.LevelError)),
		babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3), babelqueue.WithConcurrency(4),
		babelqueue.WithShutdownGrace(5*time.Second), babelqueue.WithSettleTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		handled  = map[int]int{}          // good message n -> times handled
		tried    = map[int]map[int]bool{} // failing message n -> attempts seen
		badTries = map[string]int{}       // anomalies seen by handlers
		failing  = map[int]bool{}         // which n fail
		dead     = map[int]restartDeadLetter{}
		deadDups int
	)
	type payload struct {
		N int `json:"n"`
	}
	babelqueue.Handle(a, restartOK, func(_ context.Context, p payload, m *babelqueue.Message) error {
		time.Sleep(2 * time.Millisecond) // the handler's work: deliveries are in flight when the broker stops
		mu.Lock()
		defer mu.Unlock()
		handled[p.N]++
		if m.Attempts != 0 {
			badTries[fmt.Sprintf("good message %d handled with attempts %d", p.N, m.Attempts)]++
		}
		return nil
	})
	babelqueue.Handle(a, restartFail, func(_ context.Context, p payload, m *babelqueue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if tried[p.N] == nil {
			tried[p.N] = map[int]bool{}
		}
		tried[p.N][m.Attempts] = true
		if m.Attempts > 2 {
			badTries[fmt.Sprintf("failing message %d handled with attempts %d", p.N, m.Attempts)]++
		}
		return fmt.Errorf("refused %d", p.N)
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
		fs := dlqCl.PollFetches(pctx)
		mu.Lock()
		defer mu.Unlock()
		fs.EachRecord(func(r *kgo.Record) {
			var d restartDeadLetter
			if err := json.Unmarshal(r.Value, &d); err != nil {
				t.Errorf("dead letter is not JSON: %v: %q", err, r.Value)
				return
			}
			if _, dup := dead[d.Data.N]; dup {
				deadDups++
			}
			dead[d.Data.N] = d
		})
	}

	// The producer: a steady stream; the broker stops after the first 100 and the stream
	// goes on through the outage (buffered by the producer) and for a while after it.
	var (
		triggered  atomic.Bool
		restarted  atomic.Bool
		restartErr = make(chan error, 1)
		stoppedIn  time.Duration // how long the broker took to stop
		downFor    time.Duration // from SIGTERM until it answered again
		afterBack  int           // published after the broker was back
		total      int           // published
	)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; (i < 400 || afterBack < 100) && ctx.Err() == nil; i++ {
			urn := restartOK
			if i%5 == 0 {
				urn = restartFail
			}
			if _, err := a.Publish(ctx, urn, map[string]any{"n": i}); err != nil {
				t.Errorf("Publish %d: %v", i, err)
				continue
			}
			mu.Lock()
			failing[i] = urn == restartFail
			total = i + 1
			if restarted.Load() {
				afterBack++
			}
			mu.Unlock()
			if i == 100 {
				triggered.Store(true)
				go func() {
					t0 := time.Now()
					node.stop()
					stoppedIn = time.Since(t0)
					err := node.start()
					downFor = time.Since(t0)
					restarted.Store(true)
					restartErr <- err
				}()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// The producer, and the restart it started, end before the test does.
	defer func() {
		cancel()
		<-published
		if triggered.Load() && !restarted.Load() {
			<-restartErr
		}
	}()

	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-published:
		default:
			return false
		}
		for i := range total {
			if failing[i] {
				if _, ok := dead[i]; !ok {
					return false
				}
			} else if handled[i] == 0 {
				return false
			}
		}
		return true
	}
	for !complete() && ctx.Err() == nil {
		readDLQ(500 * time.Millisecond)
	}
	<-published
	if !triggered.Load() {
		t.Fatal("the producer never reached the restart")
	}
	if err := <-restartErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("the broker took %s to stop and answered again %s after SIGTERM", stoppedIn.Round(time.Millisecond), downFor.Round(time.Millisecond))
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

	mu.Lock()
	defer mu.Unlock()
	missing, unDead, repeats := 0, 0, 0
	for i := range total {
		switch {
		case failing[i]:
			d, ok := dead[i]
			if !ok {
				unDead++
				continue
			}
			if d.Job != restartFail || d.Attempts != 3 || d.DeadLetter == nil || d.DeadLetter.Reason != "failed" ||
				d.DeadLetter.Attempts != 3 || d.DeadLetter.OriginalQueue != q || d.DeadLetter.Error != fmt.Sprintf("refused %d", i) {
				t.Errorf("dead letter of %d = %+v (dead_letter %+v), want attempts 3, reason failed, queue %s", i, d, d.DeadLetter, q)
			}
			for n := range 3 {
				if !tried[i][n] {
					t.Errorf("failing message %d was never handled with attempts %d (saw %v)", i, n, tried[i])
				}
			}
		case handled[i] == 0:
			missing++
		default:
			repeats += handled[i] - 1
			if _, ok := dead[i]; ok {
				t.Errorf("good message %d is in %s", i, dlq)
			}
		}
	}
	t.Logf("%d messages published (%d after the restart), %d handled (%d repeats), %d dead-lettered (%d duplicates)",
		total, afterBack, len(handled), repeats, len(dead), deadDups)
	if missing > 0 || unDead > 0 {
		t.Fatalf("lost across the restart: %d good messages never handled, %d failing messages never dead-lettered", missing, unDead)
	}
	if want := (total + 4) / 5; len(dead) != want {
		t.Errorf("%s holds %d distinct messages, want %d", dlq, len(dead), want)
	}
	for what, k := range badTries {
		t.Errorf("%s (%d times)", what, k)
	}

	// After the runtime stopped, the group's committed offsets are at the end of every
	// partition of the queue.
	if behind := groupBehind(t, adm, group, q); len(behind) > 0 {
		t.Errorf("group %s does not cover the queue: %s", group, strings.Join(behind, ", "))
	}
}

// groupBehind lists the partitions of topic whose committed offset in group is not the
// partition's end offset.
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
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		t.Fatalf("committed offsets of %s: %v", group, err)
	}
	var behind []string
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(-1)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok {
			at = c.At
		}
		if at != e.Offset {
			behind = append(behind, fmt.Sprintf("%s[%d] committed %d of %d", e.Topic, e.Partition, at, e.Offset))
		}
	})
	slices.Sort(behind)
	return behind
}
