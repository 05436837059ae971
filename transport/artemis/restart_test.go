package artemis_test

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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// artemisNode is a private Artemis instance the test creates, stops and starts again on
// its own loopback ports, so a restart never touches the broker other test suites share
// on 5673/61616.
type artemisNode struct {
	inst string // the instance directory (etc/, data/, node.log)
	amqp int    // the AMQP acceptor
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// artemisRequire fails the test under CI=true, skips it elsewhere.
func artemisRequire(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: integration tests never skip)", msg)
	}
	t.Skip(msg)
}

func artemisFreePort(t *testing.T, taken ...int) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		ok := true
		for _, q := range taken {
			ok = ok && p != q
		}
		if ok {
			return p
		}
	}
}

// startArtemisNode creates an instance from the distribution scripts/brokers.sh caches
// (${BQ_CACHE_DIR:-~/.cache/babelqueue}/apache-artemis-<version>), with the options
// scripts/brokers/artemis.sh uses but free ports and a small heap, and starts it.
// Without java or the cached distribution the test skips, or fails under CI=true.
func startArtemisNode(t *testing.T) *artemisNode {
	t.Helper()
	const hint = "; run `scripts/brokers.sh up artemis` (it installs java and caches the Artemis distribution)"
	javaHome := os.Getenv("BQ_ARTEMIS_JAVA_HOME")
	if javaHome == "" {
		javaHome = os.Getenv("JAVA_HOME")
	}
	if javaHome == "" && os.Getenv("BQ_JAVA") != "" {
		javaHome = filepath.Dir(filepath.Dir(os.Getenv("BQ_JAVA")))
	}
	if javaHome == "" {
		if _, err := exec.LookPath("java"); err != nil {
			artemisRequire(t, "artemis restart test: no java on PATH and neither JAVA_HOME nor BQ_JAVA set%s", hint)
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
	version := os.Getenv("BQ_ARTEMIS_VERSION")
	if version == "" {
		version = "2.40.0"
	}
	bin := filepath.Join(cache, "apache-artemis-"+version, "bin", "artemis")
	if _, err := os.Stat(bin); err != nil {
		artemisRequire(t, "artemis restart test: no cached Artemis distribution (%s)%s", bin, hint)
	}
	n := &artemisNode{inst: filepath.Join(t.TempDir(), "instance")}
	n.env = os.Environ()
	if javaHome != "" {
		n.env = append(n.env, "JAVA_HOME="+javaHome)
	}
	core := artemisFreePort(t)
	n.amqp = artemisFreePort(t, core)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create := exec.CommandContext(ctx, bin, "create", n.inst, "--silent", "--force",
		"--user", "artemis", "--password", "artemis", "--role", "amq", "--allow-anonymous",
		"--host", "127.0.0.1", "--name", "bqtest-restart", "--default-port", strconv.Itoa(core),
		"--no-web", "--no-hornetq-acceptor", "--no-mqtt-acceptor", "--no-stomp-acceptor",
		"--nio", "--no-autotune", "--no-fsync", "--java-memory", "256M")
	create.Env = n.env
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("artemis create: %v\n%s", err, out)
	}
	// As scripts/brokers/artemis.sh edits the shared instance: the AMQP acceptor on its
	// own port, anycast queues for auto-created addresses.
	edit := func(file string, change func(string) (string, error)) {
		t.Helper()
		p := filepath.Join(n.inst, "etc", file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := change(string(b))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("broker.xml", func(s string) (string, error) {
		if !strings.Contains(s, "tcp://127.0.0.1:5672?") || !strings.Contains(s, "tcp://127.0.0.1:"+strconv.Itoa(core)+"?") {
			return "", errors.New("the acceptors are not where scripts/brokers/artemis.sh expects them")
		}
		s = strings.Replace(s, "tcp://127.0.0.1:5672?", "tcp://127.0.0.1:"+strconv.Itoa(n.amqp)+"?", 1)
		s = strings.Replace(s, `<address-setting match="#">`, `<address-setting match="#">
            <default-address-routing-type>ANYCAST</default-address-routing-type>
            <default-queue-routing-type>ANYCAST</default-queue-routing-type>`, 1)
		// Every port the instance listens on is one of the two chosen here.
		for _, m := range regexp.MustCompile(`tcp://[0-9.]+:([0-9]+)`).FindAllStringSubmatch(s, -1) {
			if m[1] != strconv.Itoa(core) && m[1] != strconv.Itoa(n.amqp) {
				return "", fmt.Errorf("an acceptor or connector still listens on %s", m[0])
			}
		}
		return s, nil
	})
	// A small initial heap (the profile sets -Xms512M whatever --java-memory says), and a
	// JVM that starts quickly on a small machine.
	edit("artemis.profile", func(s string) (string, error) {
		s = regexp.MustCompile(`-Xms[0-9]+[MmGg]`).ReplaceAllString(s, "-Xms64M")
		return strings.Replace(s, "-XX:+UseG1GC", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1", 1), nil
	})
	t.Cleanup(n.stop)
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *artemisNode) url() string {
	return fmt.Sprintf("artemis://artemis:artemis@127.0.0.1:%d", n.amqp)
}

// start runs the instance and waits until its AMQP acceptor takes a SASL PLAIN
// connection. It does not call t.Fatal, so a test may restart the node from another
// goroutine.
func (n *artemisNode) start() error {
	logf, err := os.OpenFile(filepath.Join(n.inst, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// bin/artemis execs the JVM: the pid is the broker's.
	cmd := exec.Command(filepath.Join(n.inst, "bin", "artemis"), "run")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = n.inst, n.env, logf, logf
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
	addr := fmt.Sprintf("amqp://127.0.0.1:%d", n.amqp)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := amqp.Dial(ctx, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("artemis", "artemis")})
		cancel()
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(n.inst, "node.log"))
			if len(log) > 3000 {
				log = log[len(log)-3000:]
			}
			return fmt.Errorf("private Artemis exited during start-up:\n%s", log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("private Artemis did not take a connection within 90s")
		}
	}
}

// stop sends SIGTERM (Artemis stops the server cleanly) and waits for the JVM to exit;
// it kills the JVM after 30s.
func (n *artemisNode) stop() {
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

// ackLedger wraps a transport and counts, per delivered body, the acknowledgements its
// consumers reported as done: a body acknowledged twice is a message the broker
// delivered again after the transport said it was acknowledged.
type ackLedger struct {
	transport.Transport
	mu     sync.Mutex
	acked  map[string][]time.Time // body of a plain Ack (no writes) -> when each ack returned nil
	failed int                    // settlements that returned an error
}

func (l *ackLedger) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	c, err := l.Transport.Consume(ctx, queue, opts)
	if err != nil {
		return nil, err
	}
	return &ledgerConsumer{Consumer: c, l: l}, nil
}

type ledgerConsumer struct {
	transport.Consumer
	l *ackLedger
}

func (c *ledgerConsumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	err := c.Consumer.Settle(ctx, d, s)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	switch {
	case err != nil:
		c.l.failed++
	case s.Outcome == transport.Ack && len(s.Writes) == 0:
		c.l.acked[string(d.Body)] = append(c.l.acked[string(d.Body)], time.Now())
	}
	return err
}

// artemisLogger writes level and above to the test log (everything with BQ_TEST_DEBUG=1).
func artemisLogger(t *testing.T, level slog.Level) *slog.Logger {
	if os.Getenv("BQ_TEST_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(artemisLogWriter{t}, &slog.HandlerOptions{Level: level}))
}

type artemisLogWriter struct{ t *testing.T }

func (w artemisLogWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

const (
	restartOK   = "urn:babel:restart:ok"
	restartFail = "urn:babel:restart:fail"
)

// TestBrokerRestartMidRun stops a private Artemis (SIGTERM, waiting for the JVM to exit)
// while the runtime publishes a steady stream, four workers handle it and every fifth
// message fails into retries and the dead-letter queue; then it starts the broker again
// from the same instance. The transport reconnects by itself, and afterwards every
// message is accounted for: each good one handled (distinct ids), each failing one tried
// with attempts 0, 1, 2 and in <queue>.dlq with attempts 3, no good one dead-lettered,
// no delivery acknowledged twice, and both queues empty.
func TestBrokerRestartMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("creates and restarts a private Artemis (about 30s)")
	}
	node := startArtemisNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := transporttest.UniqueName("bqtest-restart")
	dlq := q + ".dlq"
	open := func(level slog.Level) *artemis.Transport {
		t.Helper()
		tr, err := artemis.Open(ctx, node.url(), artemis.WithLogger(artemisLogger(t, level)),
			artemis.WithMaxBackoff(500*time.Millisecond), artemis.WithConfirmTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			_ = tr.Close(cctx)
		})
		return tr
	}
	// The transport's warnings (lost links) and the runtime's errors (failed
	// settlements) go to the test log; dead-lettering each failing message is the
	// runtime's warning, expected here.
	ledger := &ackLedger{Transport: open(slog.LevelWarn), acked: map[string][]time.Time{}}
	a, err := babelqueue.New(ledger, babelqueue.WithQueue(q), babelqueue.WithLogger(artemisLogger(t, slog.LevelError)),
		babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3), babelqueue.WithConcurrency(4),
		babelqueue.WithShutdownGrace(5*time.Second), babelqueue.WithSettleTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		handled  = map[int]int{}          // good message n -> times handled
		tried    = map[int]map[int]bool{} // failing message n -> attempts seen
		anomaly  = map[string]int{}
		failing  = map[int]bool{}
		dead     = map[int]deadLetterOf{}
		deadDups int
		native   int // good messages handled with the broker's delivery-count above 0
	)
	type payload struct {
		N int `json:"n"`
	}
	babelqueue.Handle(a, restartOK, func(_ context.Context, p payload, m *babelqueue.Message) error {
		// The handler's work: deliveries are in flight when the broker stops, and a
		// backlog waits on it.
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		handled[p.N]++
		// Attempts are the larger of the body's and the broker's delivery-count: a good
		// message delivered before the stop comes back with attempts 1 (binding §7).
		if m.Attempts > 0 {
			native++
		}
		if m.Attempts > 2 {
			anomaly[fmt.Sprintf("good message %d handled with attempts %d", p.N, m.Attempts)]++
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
			anomaly[fmt.Sprintf("failing message %d handled with attempts %d", p.N, m.Attempts)]++
		}
		return fmt.Errorf("refused %d", p.N)
	})
	stopApp := runApp(t, a)

	// The dead-letter queue, read through a second transport as a user would; it rides
	// the restart too.
	dc, err := open(slog.LevelError).Consume(ctx, dlq, transport.ConsumeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	dlqCtx, stopDLQ := context.WithCancel(ctx)
	dlqDone := make(chan struct{})
	go func() {
		defer close(dlqDone)
		for {
			d, err := dc.Receive(dlqCtx)
			if err != nil {
				return
			}
			var dl deadLetterOf
			if err := json.Unmarshal(d.Body, &dl); err != nil {
				t.Errorf("dead letter is not JSON: %v: %q", err, d.Body)
			}
			// An ack lost with the connection brings the dead letter back: counted once.
			_ = dc.Settle(dlqCtx, d, transport.Settlement{Outcome: transport.Ack})
			mu.Lock()
			if _, dup := dead[dl.Data.N]; dup {
				deadDups++
			} else {
				dead[dl.Data.N] = dl
			}
			mu.Unlock()
		}
	}()
	defer func() { stopDLQ(); <-dlqDone }()

	// The producer: a steady stream; the broker stops after the first 100 and the stream
	// goes on through the outage and for a while after it. A publish that fails is
	// published again (a new message with the same n); one whose confirm was lost may be
	// stored too, so an n may arrive twice, never zero times.
	var (
		triggered  atomic.Bool
		restarted  atomic.Bool
		restartErr = make(chan error, 1)
		termAt     time.Time // when the SIGTERM was sent
		backAt     time.Time // when the broker took connections again
		stoppedIn  time.Duration
		downFor    time.Duration
		afterBack  int
		total      int
		retried    int
	)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; (i < 400 || afterBack < 100) && ctx.Err() == nil; i++ {
			urn := restartOK
			if i%5 == 0 {
				urn = restartFail
			}
			for ctx.Err() == nil {
				if _, err := a.Publish(ctx, urn, map[string]any{"n": i}); err == nil {
					break
				}
				mu.Lock()
				retried++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
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
					termAt = time.Now()
					node.stop()
					stoppedIn = time.Since(termAt)
					err := node.start()
					backAt = time.Now()
					downFor = backAt.Sub(termAt)
					restarted.Store(true)
					restartErr <- err
				}()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
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
		time.Sleep(100 * time.Millisecond)
	}
	<-published
	if !triggered.Load() {
		t.Fatal("the producer never reached the restart")
	}
	if err := <-restartErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("the broker took %s to stop and took connections again %s after SIGTERM", stoppedIn.Round(time.Millisecond), downFor.Round(time.Millisecond))
	// Let a repeat still in flight arrive, then stop the runtime and the DLQ reader.
	time.Sleep(time.Second)
	stopApp()
	stopDLQ()
	<-dlqDone

	mu.Lock()
	defer mu.Unlock()
	missing, unDead, repeats, skipped := 0, 0, 0, 0
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
			// The last try is attempts 2; attempts 0 or 1 may be skipped when a delivery
			// lost with the connection came back with the broker's delivery-count.
			if !tried[i][2] {
				t.Errorf("failing message %d was never handled with attempts 2 (saw %v)", i, tried[i])
			}
			if !tried[i][0] || !tried[i][1] {
				skipped++
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
	// Artemis refuses receiver settle mode "second", so an accept is never confirmed:
	// one written as the broker stops can be lost, and the broker delivers the message
	// again (at-least-once). Only deliveries acknowledged before the broker was back,
	// at most one per worker, may come back; an acknowledgement made to a running
	// broker must hold.
	ledger.mu.Lock()
	twice := 0
	for body, at := range ledger.acked {
		if len(at) < 2 {
			continue
		}
		twice++
		t.Logf("acknowledged %d times, first %s after the SIGTERM: %s", len(at), at[0].Sub(termAt).Round(time.Millisecond), body)
		if !at[0].Before(backAt) {
			t.Errorf("acknowledged after the broker was back, yet delivered again: %s", body)
		}
	}
	if twice > 4 {
		t.Errorf("%d deliveries acknowledged and delivered again; at most the 4 in flight when the broker stopped may be", twice)
	}
	failedSettles := ledger.failed
	ledger.mu.Unlock()
	t.Logf("%d messages published (%d after the restart, %d publishes retried), %d handled (%d repeats, %d with a delivery-count), "+
		"%d dead-lettered (%d duplicates, %d skipped an attempt through the delivery-count), %d settlements failed, %d acknowledged twice",
		total, afterBack, retried, len(handled), repeats, native, len(dead), deadDups, skipped, failedSettles, twice)
	if missing > 0 || unDead > 0 {
		t.Fatalf("lost across the restart: %d good messages never handled, %d failing messages never dead-lettered", missing, unDead)
	}
	if want := (total + 4) / 5; len(dead) != want {
		t.Errorf("%s holds %d distinct messages, want %d", dlq, len(dead), want)
	}
	for what, k := range anomaly {
		t.Errorf("%s (%d times)", what, k)
	}
	// Nothing is left behind on the broker.
	check := open(slog.LevelError)
	for _, queue := range []string{q, dlq} {
		c, err := check.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		transporttest.ExpectNothing(t, c, time.Second)
		_ = c.Close(ctx)
	}
}

// deadLetterOf is what the test reads of a dead-lettered body.
type deadLetterOf struct {
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
