package transporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// RunRuntime runs the runtime's settlement cases (docs/settlement.md) end to end through the
// transport cfg opens: a handled message is acknowledged, a failing one is retried with
// attempts+1 and dead-lettered with reason "failed", an unknown URN takes each
// on_unknown_urn strategy, and poison bodies reach the dead-letter queue with their
// bytes kept. It reads the dead-letter queue through the transport itself.
func RunRuntime(t *testing.T, cfg Config) {
	cfg.defaults()
	cases := []struct {
		name string
		fn   func(t *testing.T, cfg Config)
	}{
		{"HandledIsAcked", rtHandled},
		{"FailingHandlerRetriesThenDeadLetters", rtRetryThenDeadLetter},
		{"UnknownURNDeadLetter", rtUnknownDeadLetter},
		{"UnknownURNDelete", rtUnknownDelete},
		{"UnknownURNRelease", rtUnknownRelease},
		{"PoisonDeadLettered", rtPoison},
		{"TypedHandlerAndKey", rtTyped},
		{"AttemptsAtMaxSettleOnce", rtAttemptsAtMax},
		{"PoisonAttemptsReadFromBody", rtPoisonAttempts},
		{"NegativeAttemptsDeadLetteredAsIs", rtNegativeAttemptsDeadLetter},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, cfg) })
	}
}

// testLogger writes the runtime's logs to the test log at Warn and above, or everything
// with BQ_TEST_DEBUG=1.
func testLogger(t *testing.T) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("BQ_TEST_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// app opens an App on a fresh transport and queue; run starts it and returns a stop
// function that waits for Run to return.
func app(t *testing.T, cfg Config, opts ...babelqueue.Option) (*babelqueue.App, string) {
	t.Helper()
	q := cfg.NewQueue(t)
	tr := cfg.Open(t)
	opts = append([]babelqueue.Option{babelqueue.WithQueue(q), babelqueue.WithLogger(testLogger(t)), babelqueue.WithShutdownGrace(5 * time.Second)}, opts...)
	a, err := babelqueue.New(tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a, q
}

func run(t *testing.T, a *babelqueue.App) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("Run did not return within 60s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drain reads every message of queue through a fresh consumer on tr, acknowledging
// each, until the queue stays quiet for cfg.QuietPeriod.
func drain(t *testing.T, cfg Config, tr transport.Transport, queue string, want int) [][]byte {
	t.Helper()
	c := consume(t, cfg, tr, queue)
	var out [][]byte
	deadline := time.Now().Add(cfg.ReceiveTimeout)
	for len(out) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
		d, err := c.Receive(ctx)
		cancel()
		if err != nil {
			break
		}
		out = append(out, d.Body)
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
	if len(out) != want {
		if cfg.Explain != nil {
			t.Logf("queue %q as the broker sees it: %s", queue, cfg.Explain(t, tr, queue))
		}
		t.Fatalf("queue %q: got %d messages, want %d", queue, len(out), want)
	}
	ExpectNothing(t, c, cfg.QuietPeriod)
	return out
}

type wire struct {
	Job        any             `json:"job"`
	Attempts   int             `json:"attempts"`
	Data       json.RawMessage `json:"data"`
	DeadLetter *struct {
		Reason        string  `json:"reason"`
		Error         *string `json:"error"`
		Exception     *string `json:"exception"`
		FailedAt      int64   `json:"failed_at"`
		OriginalQueue string  `json:"original_queue"`
		Attempts      int     `json:"attempts"`
		Lang          string  `json:"lang"`
	} `json:"dead_letter"`
	Raw string `json:"raw"`
}

func parse(t *testing.T, b []byte) wire {
	t.Helper()
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("dead-letter body is not JSON: %v: %q", err, b)
	}
	return w
}

func rtHandled(t *testing.T, cfg Config) {
	a, q := app(t, cfg)
	var got atomic.Int32
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		var v struct {
			OrderID int `json:"order_id"`
		}
		if err := m.Bind(&v); err != nil || v.OrderID != 1042 {
			t.Errorf("Bind: %v %+v", err, v)
		}
		if m.Attempts != 0 {
			t.Errorf("first delivery Attempts = %d", m.Attempts)
		}
		got.Add(1)
		return nil
	})
	stop := run(t, a)
	ctx := context.Background()
	if _, err := a.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": 1042}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cfg.ReceiveTimeout, "the handler", func() bool { return got.Load() == 1 })
	stop()
	drain(t, cfg, a.Transport(), q, 0)
	drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 0)
	if got.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", got.Load())
	}
}

func rtRetryThenDeadLetter(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3))
	var mu sync.Mutex
	var seen []int
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		seen = append(seen, m.Attempts)
		mu.Unlock()
		return errors.New("payment gateway timeout")
	})
	stop := run(t, a)
	id, err := a.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 1042, "big": json.Number("12345678901234567890123")})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, cfg.ReceiveTimeout, "three attempts", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 3 })
	dead := drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 1)
	stop()
	mu.Lock()
	if len(seen) != 3 || seen[0] != 0 || seen[1] != 1 || seen[2] != 2 {
		t.Errorf("handler saw attempts %v, want [0 1 2]", seen)
	}
	mu.Unlock()
	w := parse(t, dead[0])
	if w.Attempts != 3 || w.DeadLetter == nil || w.DeadLetter.Reason != "failed" || w.DeadLetter.Attempts != 3 ||
		w.DeadLetter.OriginalQueue != q || w.DeadLetter.Lang != "go" || w.DeadLetter.Error == nil ||
		*w.DeadLetter.Error != "payment gateway timeout" || w.DeadLetter.FailedAt == 0 {
		t.Errorf("dead_letter block = %+v in %s", w.DeadLetter, dead[0])
	}
	if !bytes.Contains(dead[0], []byte(`"big":12345678901234567890123`)) || !bytes.Contains(dead[0], []byte(id)) {
		t.Errorf("dead-lettered body lost original bytes: %s", dead[0])
	}
	drain(t, cfg, a.Transport(), q, 0)
}

func rtUnknownDeadLetter(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithUnknownURN(babelqueue.UnknownDeadLetter))
	stop := run(t, a)
	if _, err := a.Publish(context.Background(), "urn:babel:nobody:home", map[string]any{"x": 1}); err != nil {
		t.Fatal(err)
	}
	dead := drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 1)
	stop()
	w := parse(t, dead[0])
	if w.DeadLetter == nil || w.DeadLetter.Reason != "unknown_urn" || w.DeadLetter.Attempts != 0 || w.Job != "urn:babel:nobody:home" ||
		w.DeadLetter.Error != nil || w.DeadLetter.Exception != nil {
		t.Errorf("unknown URN dead letter = %s", dead[0])
	}
	drain(t, cfg, a.Transport(), q, 0)
}

func rtUnknownDelete(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithUnknownURN(babelqueue.UnknownDelete), babelqueue.WithDeadLetter(true))
	var handled atomic.Int32
	a.Handle("urn:babel:known", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
	stop := run(t, a)
	ctx := context.Background()
	if _, err := a.Publish(ctx, "urn:babel:nobody:home", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(ctx, "urn:babel:known", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cfg.ReceiveTimeout, "the known message", func() bool { return handled.Load() == 1 })
	stop()
	drain(t, cfg, a.Transport(), q, 0)
	drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 0)
}

func rtUnknownRelease(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithUnknownURN(babelqueue.UnknownRelease))
	stop := run(t, a)
	if _, err := a.Publish(context.Background(), "urn:babel:other:service", map[string]any{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	// Give the runtime time to release it at least once, then stop and read it back.
	time.Sleep(cfg.QuietPeriod)
	stop()
	back := drain(t, cfg, a.Transport(), q, 1)
	w := parse(t, back[0])
	if w.Job != "urn:babel:other:service" || w.Attempts != 0 || w.DeadLetter != nil {
		t.Errorf("released message changed: %s", back[0])
	}
}

func rtPoison(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithDeadLetter(true))
	var handled atomic.Int32
	a.Handle("urn:babel:x", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
	bodies := [][]byte{
		[]byte(`not json`),
		[]byte(`{"trace_id":"t","data":{},"n":1e400}`), // identity-less: spliced
		[]byte(`{"job":42,"data":{}}`),                 // wrong type
	}
	ctx := context.Background()
	for _, b := range bodies {
		if err := a.Transport().Publish(ctx, &transport.Message{Queue: q, Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	stop := run(t, a)
	dead := drain(t, cfg, a.Transport(), a.DeadLetterQueue(), len(bodies))
	stop()
	if handled.Load() != 0 {
		t.Errorf("a poison body reached a handler")
	}
	var raw, spliced int
	for _, d := range dead {
		w := parse(t, d)
		if w.DeadLetter == nil || w.DeadLetter.Reason != "poison" || w.DeadLetter.OriginalQueue != q {
			t.Errorf("poison dead letter = %s", d)
		}
		switch {
		case w.Raw == "not json":
			raw++
		case bytes.HasPrefix(d, []byte(`{"trace_id":"t","data":{},"n":1e400`)), bytes.HasPrefix(d, []byte(`{"job":42,"data":{}`)):
			spliced++
		default:
			t.Errorf("poison dead letter neither wraps nor splices the original: %s", d)
		}
	}
	if raw != 1 || spliced != 2 {
		t.Errorf("wrapped %d and spliced %d poison bodies, want 1 and 2", raw, spliced)
	}
	drain(t, cfg, a.Transport(), q, 0)
}

type order struct {
	OrderID int    `json:"order_id"`
	Note    string `json:"note"`
}

func rtTyped(t *testing.T, cfg Config) {
	a, _ := app(t, cfg)
	got := make(chan order, 1)
	var headers sync.Map
	babelqueue.Handle(a, "urn:babel:orders:created", func(_ context.Context, o order, m *babelqueue.Message) error {
		headers.Store("h", m.Header("traceparent"))
		got <- o
		return nil
	})
	run(t, a)
	h := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	if _, err := a.Publish(context.Background(), "urn:babel:orders:created", order{OrderID: 7, Note: "café <b>"}, babelqueue.WithHeaders(h)); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.OrderID != 7 || o.Note != "café <b>" {
			t.Errorf("typed handler got %+v", o)
		}
	case <-time.After(cfg.ReceiveTimeout):
		t.Fatal("typed handler never ran")
	}
	if v, _ := headers.Load("h"); v != h["traceparent"] {
		t.Errorf("traceparent header = %v", v)
	}
}
