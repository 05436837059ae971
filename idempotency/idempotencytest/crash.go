package idempotencytest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// KillPoint is where [Crash] kills the worker.
type KillPoint string

const (
	// KillMidHandler kills the worker while its handler runs, before the effect: its
	// claim must hold off the redelivery until the lease lapses, and the message then
	// runs once.
	KillMidHandler KillPoint = "mid-handler"
	// KillAfterHandler kills the worker after its handler made the effect and the id
	// was remembered, before the acknowledgement: the broker's redelivery must be
	// acknowledged without running again.
	KillAfterHandler KillPoint = "after-handler"
)

// Environment of the child process of a crash test.
const (
	envChild   = "BQ_IDEMP_CRASH_CHILD"
	envURL     = "BQ_IDEMP_CRASH_URL"
	envQueue   = "BQ_IDEMP_CRASH_QUEUE"
	envAt      = "BQ_IDEMP_CRASH_AT"
	envSpec    = "BQ_IDEMP_CRASH_SPEC"
	envLease   = "BQ_IDEMP_CRASH_LEASE"
	envEffects = "BQ_IDEMP_CRASH_EFFECTS"
)

const crashURN = "urn:babel:idempotency:crash"

// Crash is the crash test of a store on a real broker, with the runtime: a worker in a
// child process (the test binary, started again) takes the one message of a fresh
// queue, in claim mode, and is killed with SIGKILL at a [KillPoint]; then a worker in
// the test takes over and the test counts the message's effects, which both workers
// append to a file. The test binary must import the broker's transport and call
// [CrashChild] first thing in its TestMain.
type Crash struct {
	// BrokerURL is the broker of both workers. On Redis give a short retry_after
	// (?retry_after=1) so the killed worker's reservation comes back soon.
	BrokerURL string
	// Spec says which store to open; it is handed to Open in both processes.
	Spec string
	// Open opens the store; the child calls the function given to CrashChild, which
	// must be the same. A store that is an io.Closer is closed at the end.
	Open func(ctx context.Context, spec string) (idempotency.Store, error)
	// Lease is the claim lease of both workers (default 4s). It must outlast the
	// broker's redelivery of the killed worker's message.
	Lease time.Duration
	// DeleteQueue, when set, deletes the queue (and what the broker made for it) at
	// the end of the test.
	DeleteQueue func(queue string)
}

// CrashChild runs the worker of a crash test and exits when this process is the child
// a [Crash] started; otherwise it returns at once. Call it first in TestMain, with the
// function the tests give [Crash.Open].
func CrashChild(open func(ctx context.Context, spec string) (idempotency.Store, error)) {
	if os.Getenv(envChild) != "1" {
		return
	}
	if err := runChild(open); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func runChild(open func(ctx context.Context, spec string) (idempotency.Store, error)) error {
	ctx := context.Background()
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		return err
	}
	store, err := open(ctx, os.Getenv(envSpec))
	if err != nil {
		return err
	}
	mw, err := idempotency.Middleware(store, idempotency.WithMode(idempotency.ModeClaim), idempotency.WithLease(lease))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	app, err := babelqueue.Open(ctx, os.Getenv(envURL), babelqueue.WithQueue(os.Getenv(envQueue)), babelqueue.WithLogger(log))
	if err != nil {
		return err
	}
	at := KillPoint(os.Getenv(envAt))
	effects := os.Getenv(envEffects)
	stop := func(what, id string) {
		fmt.Println(what, id) // the test reads it and kills this process
		time.Sleep(time.Hour)
	}
	if at == KillAfterHandler {
		app.Use(func(next babelqueue.Handler) babelqueue.Handler {
			return func(ctx context.Context, m *babelqueue.Message) error {
				err := next(ctx, m)
				if err == nil { // the effect is made and the id remembered; the ack is next
					stop("handled", m.ID())
				}
				return err
			}
		})
	}
	app.Use(mw)
	app.Handle(crashURN, func(_ context.Context, m *babelqueue.Message) error {
		if at == KillMidHandler {
			stop("started", m.ID())
		}
		return appendEffect(effects, m.ID(), "child")
	})
	return app.Run(ctx)
}

func appendEffect(path, id, who string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%s %s\n", id, who); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Run runs the crash test, killing the child at at.
func (c Crash) Run(t *testing.T, at KillPoint) {
	lease := c.Lease
	if lease <= 0 {
		lease = 4 * time.Second
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	queue := "bq-idemp-crash-" + hex.EncodeToString(b[:])
	if c.DeleteQueue != nil {
		t.Cleanup(func() { c.DeleteQueue(queue) })
	}
	effects := filepath.Join(t.TempDir(), "effects")
	ctx := context.Background()

	rec := transporttest.NewRecorder()
	app, err := babelqueue.Open(ctx, c.BrokerURL, babelqueue.WithQueue(queue), babelqueue.WithObserver(rec),
		babelqueue.WithLogger(brokerproc.TestLogger(t, slog.LevelInfo)), babelqueue.WithShutdownGrace(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	id, err := app.Publish(ctx, crashURN, map[string]string{"order": "A-1"})
	if err != nil {
		t.Fatal(err)
	}

	// The child takes the message and is killed at the kill point.
	childStart := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envURL+"="+c.BrokerURL, envQueue+"="+queue, envAt+"="+string(at),
		envSpec+"="+c.Spec, envLease+"="+lease.String(), envEffects+"="+effects)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	want := map[KillPoint]string{KillMidHandler: "started " + id, KillAfterHandler: "handled " + id}[at]
	if err := waitLine(stdout, want, time.Minute); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child worker: %v\nits stderr:\n%s", err, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred code, no ack
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("child worker killed %s, %s after it started", at, time.Since(childStart).Round(time.Millisecond))

	// A worker in this process takes over.
	store, err := c.Open(ctx, c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if cl, ok := store.(io.Closer); ok {
		t.Cleanup(func() { _ = cl.Close() })
	}
	mw, err := idempotency.Middleware(store, idempotency.WithMode(idempotency.ModeClaim), idempotency.WithLease(lease),
		idempotency.WithHeldRetry(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var ranAt []time.Time
	app.Use(mw)
	app.Handle(crashURN, func(_ context.Context, m *babelqueue.Message) error {
		ranAt = append(ranAt, time.Now())
		return appendEffect(effects, m.ID(), "parent")
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	acked := WaitAcked(t, rec, id, lease+time.Minute)
	time.Sleep(500 * time.Millisecond) // nothing else may come
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	got := readEffects(t, effects)[id]
	requeued := 0
	for _, e := range rec.SettledEvents() {
		if e.Delivery.ID == id && e.Kind == babelqueue.KindRequeued {
			requeued++
		}
	}
	t.Logf("effects of %s: %v; the test's worker requeued it %d times while the claim held, acknowledged it %s after the child started",
		id, got, requeued, acked.Sub(childStart).Round(time.Millisecond))
	switch at {
	case KillMidHandler:
		if len(got) != 1 || got[0] != "parent" || len(ranAt) != 1 {
			t.Fatalf("effects %v, handler runs in the test %d; want one effect, by the test's worker", got, len(ranAt))
		}
		if ranAt[0].Before(childStart.Add(lease)) {
			t.Fatalf("the message ran again %s after the child started, before the %s lease lapsed",
				ranAt[0].Sub(childStart), lease)
		}
		if requeued == 0 {
			t.Fatal("the redelivery was never requeued: the killed worker's claim did not hold it off")
		}
	case KillAfterHandler:
		if len(got) != 1 || got[0] != "child" || len(ranAt) != 0 {
			t.Fatalf("effects %v, handler runs in the test %d; want the child's effect alone", got, len(ranAt))
		}
	}
}

// WaitAcked waits until rec saw the message id acknowledged after its handler (or the
// middleware) returned nil, and returns when; it fails the test after timeout.
func WaitAcked(t *testing.T, rec *transporttest.Recorder, id string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, e := range rec.SettledEvents() {
			if e.Delivery.ID == id && e.Kind == babelqueue.KindHandled && e.Action == babelqueue.ActionAck && e.Err == nil {
				return time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("message %s was not acknowledged within %s; settlements: %+v", id, timeout, rec.SettledEvents())
	return time.Time{}
}

func waitLine(r io.Reader, want string, timeout time.Duration) error {
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == want {
				found <- nil
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		found <- fmt.Errorf("exited before it printed %q", want)
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("did not print %q within %s", want, timeout)
	}
}

// readEffects returns who made each effect, per message id.
func readEffects(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if id, who, ok := strings.Cut(line, " "); ok {
			out[id] = append(out[id], who)
		}
	}
	return out
}
