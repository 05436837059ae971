package artemis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// artemisNode is a private Artemis instance the test creates, stops and starts again on
// its own loopback ports, so a restart never touches the broker other test suites share
// on 5673/61616.
type artemisNode struct {
	*brokerproc.Process
	inst string // the instance directory (etc/, data/, node.log)
	amqp int    // the AMQP acceptor
	env  []string
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
			brokerproc.Require(t, "artemis restart test: no java on PATH and neither JAVA_HOME nor BQ_JAVA set%s", hint)
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
		brokerproc.Require(t, "artemis restart test: no cached Artemis distribution (%s)%s", bin, hint)
	}
	n := &artemisNode{inst: filepath.Join(t.TempDir(), "instance")}
	n.env = os.Environ()
	if javaHome != "" {
		n.env = append(n.env, "JAVA_HOME="+javaHome)
	}
	core := brokerproc.FreePort(t)
	n.amqp = brokerproc.FreePort(t, core)
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
	n.Process = brokerproc.New(t, brokerproc.Config{
		Name: "private Artemis",
		Command: func() *exec.Cmd {
			// bin/artemis execs the JVM: the pid is the broker's.
			cmd := exec.Command(filepath.Join(n.inst, "bin", "artemis"), "run")
			cmd.Dir, cmd.Env = n.inst, n.env
			// Its own process group (a ^C of the test run does not reach it first), and
			// killed with the test process should that die without cleaning up.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		Log:      filepath.Join(n.inst, "node.log"),
		Ready:    n.ready,
		Poll:     200 * time.Millisecond,
		Awaiting: "take a connection",
		// SIGTERM: Artemis stops the server cleanly; the JVM is killed if it has not
		// exited within 30s.
	})
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *artemisNode) url() string {
	return fmt.Sprintf("artemis://artemis:artemis@127.0.0.1:%d", n.amqp)
}

// ready reports whether the AMQP acceptor takes a SASL PLAIN connection: the instance
// is up.
func (n *artemisNode) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, fmt.Sprintf("amqp://127.0.0.1:%d", n.amqp), &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("artemis", "artemis")})
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// ackLedger wraps a transport and counts, per delivered body, the acknowledgements its
// consumers reported as done: a body acknowledged twice is a message the broker
// delivered again after the transport said it was acknowledged.
type ackLedger struct {
	transport.Transport
	mu     sync.Mutex
	acked  map[string][]ackedAt // body of a plain Ack (no writes) -> each ack that returned nil
	failed int                  // settlements that returned an error
}

// ackedAt is one acknowledgement the transport said was done: when, and the delivery's
// delivery-count (a repeat with 0 was stored twice; one above 0 was delivered again).
type ackedAt struct {
	at           time.Time
	redeliveries int
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
		c.l.acked[string(d.Body)] = append(c.l.acked[string(d.Body)], ackedAt{time.Now(), d.Redeliveries})
	}
	return err
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
		tr, err := artemis.Open(ctx, node.url(), artemis.WithLogger(brokerproc.TestLogger(t, level)),
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
	ledger := &ackLedger{Transport: open(slog.LevelWarn), acked: map[string][]ackedAt{}}
	a, err := babelqueue.New(ledger, babelqueue.WithQueue(q), babelqueue.WithLogger(brokerproc.TestLogger(t, slog.LevelError)),
		babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3), babelqueue.WithConcurrency(4),
		babelqueue.WithShutdownGrace(5*time.Second), babelqueue.WithSettleTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w := brokerproc.NewWorkload(q, restartFail, 3)
	var native atomic.Int64 // good messages handled with the broker's delivery-count above 0
	type payload struct {
		N int `json:"n"`
	}
	babelqueue.Handle(a, restartOK, func(_ context.Context, p payload, m *babelqueue.Message) error {
		// The handler's work: deliveries are in flight when the broker stops, and a
		// backlog waits on it.
		time.Sleep(30 * time.Millisecond)
		w.Handled(p.N)
		// Attempts are the larger of the body's and the broker's delivery-count: a good
		// message delivered before the stop comes back with attempts 1 (binding §7).
		if m.Attempts > 0 {
			native.Add(1)
		}
		if m.Attempts > 2 {
			w.Anomaly("good message %d handled with attempts %d", p.N, m.Attempts)
		}
		return nil
	})
	babelqueue.Handle(a, restartFail, func(_ context.Context, p payload, m *babelqueue.Message) error {
		return w.Refuse(p.N, m.Attempts)
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
			// An ack lost with the connection brings the dead letter back: counted once.
			_ = dc.Settle(dlqCtx, d, transport.Settlement{Outcome: transport.Ack})
			if err := w.DeadLettered(d.Body); err != nil {
				t.Errorf("dead letter is not JSON: %v: %q", err, d.Body)
			}
		}
	}()
	defer func() { stopDLQ(); <-dlqDone }()

	// The producer: a steady stream; the broker stops after the first 100 and the stream
	// goes on through the outage and for a while after it. A publish that fails is
	// published again (a new message with the same n); one whose confirm was lost may be
	// stored too, so an n may arrive twice, never zero times.
	var retried int // the producer's
	run := w.Produce(ctx, func(i int, failing bool) bool {
		urn := restartOK
		if failing {
			urn = restartFail
		}
		for ctx.Err() == nil {
			if _, err := a.Publish(ctx, urn, map[string]any{"n": i}); err == nil {
				break
			}
			retried++
			time.Sleep(50 * time.Millisecond)
		}
		return true
	}, node.Stop, node.Start)
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
		time.Sleep(100 * time.Millisecond)
	}
	run.Wait(t)
	t.Logf("the broker took %s to stop and took connections again %s after SIGTERM", run.StoppedIn.Round(time.Millisecond), run.DownFor.Round(time.Millisecond))
	// Let a repeat still in flight arrive, then stop the runtime and the DLQ reader.
	time.Sleep(time.Second)
	stopApp()
	stopDLQ()
	<-dlqDone

	skipped := 0
	tl := w.Tally(t, func(i int, tried map[int]bool) {
		// The last try is attempts 2; attempts 0 or 1 may be skipped when a delivery
		// lost with the connection came back with the broker's delivery-count.
		if !tried[2] {
			t.Errorf("failing message %d was never handled with attempts 2 (saw %v)", i, tried)
		}
		if !tried[0] || !tried[1] {
			skipped++
		}
	})
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
		var when []string
		for _, a := range at {
			when = append(when, fmt.Sprintf("%s after the SIGTERM (delivery-count %d)", a.at.Sub(run.TermAt).Round(time.Millisecond), a.redeliveries))
		}
		t.Logf("acknowledged %d times (the broker was back %s after the SIGTERM): %s: %s", len(at), run.BackAt.Sub(run.TermAt).Round(time.Millisecond), strings.Join(when, ", "), body)
		if !at[0].at.Before(run.BackAt) {
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
		tl.Total, run.AfterBack, retried, tl.Handled, tl.Repeats, native.Load(), tl.Dead, tl.DeadDups, skipped, failedSettles, twice)
	w.Verdict(t, tl)
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
