package babelqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestRuntimeKitOnMemory(t *testing.T) {
	transporttest.RunRuntime(t, transporttest.Config{
		Open: func(*testing.T) transport.Transport { return memory.New() },
	})
}

type harness struct {
	t    *testing.T
	tr   *memory.Transport
	app  *babelqueue.App
	logs *transporttest.LogBuffer
	rec  *transporttest.Recorder
	stop func()
}

func newHarness(t *testing.T, tr *memory.Transport, opts ...babelqueue.Option) *harness {
	t.Helper()
	logs := &transporttest.LogBuffer{}
	rec := transporttest.NewRecorder()
	opts = append([]babelqueue.Option{
		babelqueue.WithQueue("orders"),
		babelqueue.WithObserver(rec),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		babelqueue.WithShutdownGrace(2 * time.Second),
	}, opts...)
	a, err := babelqueue.New(tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, tr: tr, app: a, logs: logs, rec: rec}
}

func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.app.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run: %v", err)
			}
		})
	}
	h.t.Cleanup(h.stop)
}

func (h *harness) inject(body string, s memory.Stored) {
	s.Body = []byte(body)
	h.tr.Inject("orders", s)
}

func (h *harness) waitQueue(queue string, n int) []memory.Stored {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := h.tr.Messages(queue)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("queue %q holds %d messages, want %d\nlogs:\n%s", queue, len(got), n, h.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settled waits until nothing is waiting or in flight on orders.
func (h *harness) settled() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.tr.Messages("orders")) > 0 || h.tr.InFlight("orders") > 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("orders never drained\nlogs:\n%s", h.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const good = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"big":12345678901234567890123,"x":1e400},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0,"x-extra":{"kept":true}}`

func TestFailingHandlerRetriesThenDeadLettersWithBytesKept(t *testing.T) {
	h := newHarness(t, memory.New(), babelqueue.WithDeadLetter(true))
	var calls atomic.Int32
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("payment gateway timeout")
	})
	h.inject(good, memory.Stored{})
	h.run()
	dead := h.waitQueue("orders.dlq", 1)
	h.stop()
	if calls.Load() != 3 {
		t.Errorf("handler ran %d times, want 3", calls.Load())
	}
	// Like the Python SDK and the conformance fixture, the body's attempts records the
	// attempts made (3), and so does the dead_letter block.
	want := strings.Replace(good, `"attempts":0`, `"attempts":3`, 1)
	want = want[:len(want)-1] + `,"dead_letter":{"reason":"failed","error":"payment gateway timeout","exception":"errors.errorString",`
	if got := string(dead[0].Body); !strings.HasPrefix(got, want) {
		t.Errorf("dead-letter body:\n got %s\nwant prefix %s", got, want)
	}
	if !strings.Contains(string(dead[0].Body), `"original_queue":"orders","attempts":3,"lang":"go"}`) {
		t.Errorf("dead_letter block: %s", dead[0].Body)
	}
}

func TestRetryKeepsUnknownMembersAndChangesOnlyAttempts(t *testing.T) {
	h := newHarness(t, memory.New())
	release := make(chan struct{})
	var calls atomic.Int32
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("first try fails")
		}
		<-release
		return nil
	})
	h.inject(good, memory.Stored{Key: []byte{}})
	h.run()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	h.settled()
	h.stop()
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", calls.Load())
	}
	if got := h.rec.SettledEvents(); len(got) != 2 || got[0].Action != babelqueue.ActionRetry || got[1].Action != babelqueue.ActionAck {
		t.Errorf("settlements %v, want a retry then an ack", actions(got))
	}
}

func TestRetryBodyIsByteIdenticalButAttempts(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithRetryTiers(time.Hour))
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { return errors.New("no") })
	h.inject(good, memory.Stored{Key: []byte{}, Headers: map[string]string{"traceparent": "tp"}})
	h.run()
	var m memory.Stored
	deadline := time.Now().Add(10 * time.Second)
	for m.DueAt.IsZero() && time.Now().Before(deadline) {
		if got := h.tr.Messages("orders"); len(got) == 1 {
			m = got[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.stop()
	if want := strings.Replace(good, `"attempts":0`, `"attempts":1`, 1); string(m.Body) != want {
		t.Errorf("retry body:\n got %s\nwant %s", m.Body, want)
	}
	if m.Key == nil || len(m.Key) != 0 {
		t.Errorf("empty key became %#v", m.Key)
	}
	if m.Headers["traceparent"] != "tp" {
		t.Errorf("headers lost on retry: %v", m.Headers)
	}
	if m.DueAt.IsZero() || time.Until(m.DueAt) < 50*time.Minute {
		t.Errorf("retry tier of 1h not applied: due %v", m.DueAt)
	}
}

func TestFailedSettleWriteRewindsAndLosesNothing(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1))
	var calls atomic.Int32
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("boom")
	})
	var failures atomic.Int32
	tr.FailWrites(func(m *transport.Message) error {
		if m.Queue == "orders.dlq" && failures.Add(1) <= 2 {
			return errors.New("DLQ unavailable")
		}
		return nil
	})
	h.inject(good, memory.Stored{})
	h.run()
	dead := h.waitQueue("orders.dlq", 1)
	h.settled()
	h.stop()
	if len(dead) != 1 {
		t.Fatalf("DLQ holds %d messages, want exactly 1", len(dead))
	}
	if calls.Load() != 3 {
		t.Errorf("handler ran %d times: want 3 (two failed DLQ writes rewound the delivery)", calls.Load())
	}
	var failed int
	for _, e := range h.rec.SettledEvents() {
		if e.Err != nil {
			failed++
			if e.Action != babelqueue.ActionDeadLetter || !errors.Is(e.Err, transport.ErrSettleWrite) || e.Writes[0].Queue != "orders.dlq" {
				t.Errorf("failed settlement reported as %s %v to %v", e.Action, e.Err, e.Writes)
			}
		}
	}
	if failed != 2 {
		t.Errorf("the observer saw %d failed settlements, want 2", failed)
	}
}

func TestPanicAndTimeoutAreFailures(t *testing.T) {
	h := newHarness(t, memory.New(), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1),
		babelqueue.WithHandlerTimeout(50*time.Millisecond))
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { panic("nil map") })
	h.app.Handle("urn:babel:slow", func(ctx context.Context, _ *babelqueue.Message) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	h.inject(good, memory.Stored{})
	h.inject(strings.Replace(good, "urn:babel:orders:created", "urn:babel:slow", 1), memory.Stored{})
	h.run()
	dead := h.waitQueue("orders.dlq", 2)
	h.stop()
	var sawPanic, sawTimeout bool
	for _, d := range dead {
		s := string(d.Body)
		sawPanic = sawPanic || strings.Contains(s, `"exception":"babelqueue.PanicError"`)
		sawTimeout = sawTimeout || strings.Contains(s, "handler timed out")
	}
	if !sawPanic || !sawTimeout {
		t.Errorf("panic=%v timeout=%v in %v", sawPanic, sawTimeout, dead)
	}
}

func TestPoisonWithDLQOffTakesTheBoundedPath(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithMaxAttempts(3))
	h.inject(`{"trace_id":"t","data":{}}`, memory.Stored{})
	h.run()
	// Re-published with attempts 1 and 2 in the attempts header, then dropped.
	got := h.rec.WaitSettled(t, 3, 10*time.Second)
	h.settled()
	h.stop()
	if a := actions(got); a != "poison/poison_retry poison/poison_retry poison/drop" {
		t.Errorf("poison settled as %s, want two bounded re-publishes then a drop", a)
	}
	if len(tr.Messages("orders.dlq")) != 0 {
		t.Errorf("poison with the DLQ off reached the DLQ")
	}
}

func TestPoisonHandedToTheBrokerOnHandOffTransports(t *testing.T) {
	tr := memory.New(memory.WithCapabilities(transport.Capabilities{HandOff: true, SchemaGate: true}))
	h := newHarness(t, tr)
	h.inject(`[1,2]`, memory.Stored{})
	h.inject(good, memory.Stored{SchemaVersion: "2"})
	h.run()
	deadline := time.Now().Add(10 * time.Second)
	for len(tr.HandedOff("orders")) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	h.stop()
	if got := tr.HandedOff("orders"); len(got) != 2 {
		t.Fatalf("handed off %d deliveries, want the poison body and the gate rejection", len(got))
	}
}

func TestSchemaGate(t *testing.T) {
	caps := transport.Capabilities{SchemaGate: true}
	t.Run("DLQ on: raw body, no dead_letter block", func(t *testing.T) {
		tr := memory.New(memory.WithCapabilities(caps))
		h := newHarness(t, tr, babelqueue.WithDeadLetter(true))
		var handled atomic.Int32
		h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
		h.app.Handle("babelqueue:unsupported-schema-version:2", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
		h.inject(good, memory.Stored{SchemaVersion: "2"})
		h.run()
		dead := h.waitQueue("orders.dlq", 1)
		h.stop()
		if string(dead[0].Body) != good {
			t.Errorf("gate-rejected body changed on its way to the DLQ:\n%s", dead[0].Body)
		}
		if handled.Load() != 0 {
			t.Error("a gate-rejected delivery reached a handler")
		}
		if got := h.rec.SettledEvents(); len(got) != 1 || got[0].Delivery.URN != "babelqueue:unsupported-schema-version:2" || !got[0].Delivery.Rejected {
			t.Errorf("the delivery was not reported on the reserved route: %+v", got)
		}
	})
	t.Run("DLQ off: dropped with a warning", func(t *testing.T) {
		tr := memory.New(memory.WithCapabilities(caps))
		h := newHarness(t, tr)
		h.inject(good, memory.Stored{SchemaVersion: " 1"})
		h.run()
		h.settled()
		h.stop()
		got := h.rec.SettledEvents()
		if len(got) != 1 || got[0].Kind != babelqueue.KindSchemaRejected || got[0].Action != babelqueue.ActionDrop {
			t.Errorf("want one rejection dropped, got %s", actions(got))
		}
		if !strings.Contains(h.logs.String(), "level=WARN") || len(tr.Messages("orders.dlq")) != 0 {
			t.Errorf("want a warning and nothing in the DLQ:\n%s", h.logs.String())
		}
	})
	t.Run("blank header: decoded as usual", func(t *testing.T) {
		tr := memory.New(memory.WithCapabilities(caps))
		h := newHarness(t, tr)
		got := make(chan struct{}, 1)
		h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { got <- struct{}{}; return nil })
		h.inject(good, memory.Stored{SchemaVersion: " \t"})
		h.run()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("a blank schema header blocked the message")
		}
	})
}

func TestGracefulShutdownFinishesInFlightHandlers(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithConcurrency(4))
	started := make(chan struct{}, 4)
	var finished atomic.Int32
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		started <- struct{}{}
		time.Sleep(200 * time.Millisecond)
		finished.Add(1)
		return nil
	})
	for range 4 {
		h.inject(good, memory.Stored{})
	}
	h.run()
	for range 4 {
		<-started
	}
	h.stop()
	if finished.Load() != 4 {
		t.Errorf("%d of 4 in-flight handlers finished before Run returned", finished.Load())
	}
	if n := len(tr.Messages("orders")) + tr.InFlight("orders"); n != 0 {
		t.Errorf("%d messages left after a graceful stop, want 0", n)
	}
}

func TestHandlerOutlivingGraceIsGivenBack(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithShutdownGrace(50*time.Millisecond))
	started := make(chan struct{})
	h.app.Handle("urn:babel:orders:created", func(ctx context.Context, _ *babelqueue.Message) error {
		close(started)
		<-ctx.Done() // honours cancellation only once the grace is over
		time.Sleep(100 * time.Millisecond)
		return nil
	})
	h.inject(good, memory.Stored{})
	h.run()
	<-started
	h.stop()
	if got := tr.Messages("orders"); len(got) != 1 || string(got[0].Body) != good {
		t.Fatalf("the interrupted delivery was not given back intact: %v", got)
	}
}

func TestKafkaLikePoisonWithoutTiersWarnsAtStart(t *testing.T) {
	tr := memory.New(memory.WithCapabilities(transport.Capabilities{PoisonNeedsRetryTiers: true}))
	h := newHarness(t, tr)
	if !strings.Contains(h.logs.String(), "poison records will be committed, dropped and logged") {
		t.Errorf("no start-up warning:\n%s", h.logs.String())
	}
	h.inject(`nope`, memory.Stored{})
	h.run()
	h.settled()
	h.stop()
	if got := h.rec.SettledEvents(); len(got) != 1 || got[0].Action != babelqueue.ActionDrop || got[0].Reason != "poison without retry tiers or DLQ" {
		t.Errorf("poison was not dropped: %+v", got)
	}
	if !strings.Contains(h.logs.String(), "poison without retry tiers") {
		t.Errorf("the drop was not logged:\n%s", h.logs.String())
	}
}

func TestOpenAndOptionErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := babelqueue.Open(ctx, "nats://127.0.0.1:4222"); !errors.Is(err, transport.ErrUnknownScheme) ||
		!strings.Contains(err.Error(), "memory://") || !strings.Contains(err.Error(), "redis:// (github.com/babelqueue-go/babelqueue/transport/redis)") {
		t.Errorf("unknown scheme should name the registered schemes and the packages of the others: %v", err)
	}
	if _, err := babelqueue.Open(ctx, "kafka://u:hunter2@127.0.0.1:9092"); err == nil || strings.Contains(err.Error(), "hunter2") ||
		!strings.Contains(err.Error(), "transport/kafka") {
		t.Errorf("unregistered known scheme: %v", err)
	}
	for name, opt := range map[string]babelqueue.Option{
		"max attempts 0":   babelqueue.WithMaxAttempts(0),
		"concurrency 0":    babelqueue.WithConcurrency(0),
		"empty queue":      babelqueue.WithQueue(" "),
		"negative tier":    babelqueue.WithRetryTiers(-time.Second),
		"bad strategy":     babelqueue.WithUnknownURN(babelqueue.UnknownURNStrategy(9)),
		"nil logger":       babelqueue.WithLogger(nil),
		"negative timeout": babelqueue.WithHandlerTimeout(-1),
		"nil unmarshal":    babelqueue.WithUnmarshal(nil),
	} {
		if _, err := babelqueue.Open(ctx, "memory://", opt); !errors.Is(err, babelqueue.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := babelqueue.ParseUnknownURNStrategy("dead_letter"); err != nil {
		t.Error(err)
	}
	if _, err := babelqueue.ParseUnknownURNStrategy("explode"); !errors.Is(err, babelqueue.ErrInvalidOption) {
		t.Errorf("ParseUnknownURNStrategy(explode) = %v", err)
	}
}

func TestPublishErrors(t *testing.T) {
	a, err := babelqueue.Open(context.Background(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.Publish(ctx, "", map[string]any{}); err == nil {
		t.Error("empty URN accepted")
	}
	if _, err := a.Publish(ctx, "urn:x", []int{1}); err == nil {
		t.Error("data that is not an object accepted")
	}
	if _, err := a.Publish(ctx, "urn:x", map[string]any{"c": make(chan int)}); err == nil {
		t.Error("unmarshalable data accepted")
	}
	id, err := a.Publish(ctx, "urn:x", struct {
		A string `json:"a"`
	}{"<&>"}, babelqueue.ToQueue("other"), babelqueue.ContinueTrace("trace-1"))
	if err != nil || id == "" {
		t.Fatalf("Publish = %q, %v", id, err)
	}
	tr := a.Transport().(*memory.Transport)
	got := tr.Messages("other")
	if len(got) != 1 {
		t.Fatalf("other holds %d", len(got))
	}
	var w struct {
		TraceID string `json:"trace_id"`
		Meta    struct {
			ID    string `json:"id"`
			Queue string `json:"queue"`
			Lang  string `json:"lang"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(got[0].Body, &w); err != nil {
		t.Fatal(err)
	}
	if w.TraceID != "trace-1" || w.Meta.ID != id || w.Meta.Queue != "other" || w.Meta.Lang != "go" || !bytes.Contains(got[0].Body, []byte(`"<&>"`)) {
		t.Errorf("published %s", got[0].Body)
	}
	_ = a.Close(ctx)
	if _, err := a.Publish(ctx, "urn:x", map[string]any{}); !errors.Is(err, babelqueue.ErrClosed) {
		t.Errorf("Publish after Close = %v", err)
	}
}

// actions lists settlements as "kind/action", space separated.
func actions(evs []babelqueue.SettledEvent) string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Kind) + "/" + string(e.Action)
	}
	return strings.Join(out, " ")
}
