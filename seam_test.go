package babelqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const urn = "urn:babel:orders:created"

func TestMiddlewareOrder(t *testing.T) {
	h := newHarness(t, memory.New())
	var mu sync.Mutex
	var trail []string
	mark := func(name string) babelqueue.Middleware {
		return func(next babelqueue.Handler) babelqueue.Handler {
			return func(ctx context.Context, m *babelqueue.Message) error {
				mu.Lock()
				trail = append(trail, name+">")
				mu.Unlock()
				err := next(ctx, m)
				mu.Lock()
				trail = append(trail, "<"+name)
				mu.Unlock()
				return err
			}
		}
	}
	h.app.Use(mark("A"), mark("B"))
	h.app.Handle(urn, func(context.Context, *babelqueue.Message) error {
		mu.Lock()
		trail = append(trail, "h")
		mu.Unlock()
		return nil
	}, mark("C"), mark("D"))
	h.app.Use(mark("E")) // added after Handle: still wraps it, innermost of the app-wide ones
	h.inject(good, memory.Stored{})
	h.run()
	h.rec.WaitSettled(t, 1, 10*time.Second)
	h.stop()
	if got, want := strings.Join(trail, " "), "A> B> E> C> D> h <D <C <E <B <A"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
}

func TestMiddlewareCanShortCircuitAndAnswer(t *testing.T) {
	h := newHarness(t, memory.New(), babelqueue.WithDeadLetter(true))
	ran := false
	h.app.Use(func(babelqueue.Handler) babelqueue.Handler {
		return func(context.Context, *babelqueue.Message) error {
			return babelqueue.NoRetry(errors.New(`data/order_id: must be >= 1`))
		}
	})
	h.app.Handle(urn, func(context.Context, *babelqueue.Message) error { ran = true; return nil })
	h.inject(good, memory.Stored{})
	h.run()
	dead := h.waitQueue("orders.dlq", 1)
	h.stop()
	if ran {
		t.Error("the handler ran behind a middleware that answered")
	}
	body := string(dead[0].Body)
	for _, want := range []string{`"reason":"failed"`, `"error":"data/order_id: must be >= 1"`, `"exception":"errors.errorString"`, `"attempts":1`} {
		if !strings.Contains(body, want) {
			t.Errorf("dead letter lacks %s: %s", want, body)
		}
	}
}

func TestObserverSeesEveryStep(t *testing.T) {
	h := newHarness(t, memory.New(), babelqueue.WithRetryTiers(time.Hour))
	h.app.Handle(urn, func(context.Context, *babelqueue.Message) error {
		time.Sleep(5 * time.Millisecond)
		return errors.New("gateway down")
	})
	h.inject(good, memory.Stored{Headers: map[string]string{"traceparent": "tp"}})
	h.run()
	ev := h.rec.WaitSettled(t, 1, 10*time.Second)[0]
	h.stop()
	h.rec.OnReceive(context.Background(), babelqueue.DeliveryInfo{}) // the recorder is also usable by hand
	r := h.rec
	r.Received = r.Received[:len(r.Received)-1]
	if len(r.Received) != 1 || r.Received[0].ID != "f1e2d3c4-b5a6-4789-90ab-cdef01234567" || r.Received[0].Lang != "php" ||
		r.Received[0].CreatedAt != 1749132727000 || r.Received[0].BodySize != len(good) || r.Received[0].Headers["traceparent"] != "tp" {
		t.Errorf("received %+v", r.Received)
	}
	if len(r.Handled) != 1 || r.Handled[0].Err == nil || r.Handled[0].Err.Error() != "gateway down" || r.Handled[0].Duration < 5*time.Millisecond {
		t.Errorf("handled %+v", r.Handled)
	}
	if ev.Kind != babelqueue.KindFailed || ev.Action != babelqueue.ActionRetry || ev.Attempts != 1 || ev.Cause == nil ||
		len(ev.Writes) != 1 || ev.Writes[0].Queue != "orders" || ev.Writes[0].Delay != time.Hour || ev.Err != nil {
		t.Errorf("settled %+v", ev)
	}
}

// misspelt has a method that looks like a hook but is none (OnRecieve).
type misspelt struct{}

func (misspelt) OnRecieve(context.Context, babelqueue.DeliveryInfo) {}

// pointerHook implements SettleHook on its pointer only.
type pointerHook struct{}

func (*pointerHook) OnSettled(context.Context, babelqueue.SettledEvent) {}

// An observer that implements none of the hooks would never be told anything: it is
// refused, naming its type, where a nil one is too.
func TestObserverWithoutHooksIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		obs  babelqueue.Observer
		want string // in the error; "" when accepted
	}{
		{"nil", nil, "observer is nil"},
		{"no methods", struct{}{}, "observer struct {} implements none of the hooks"},
		{"a misspelt hook", misspelt{}, "observer babelqueue_test.misspelt implements none of the hooks"},
		{"a pointer hook given as a value", pointerHook{}, "observer babelqueue_test.pointerHook implements none of the hooks"},
		{"a pointer hook given as a pointer", &pointerHook{}, ""},
		{"the recorder", transporttest.NewRecorder(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, err := babelqueue.New(memory.New(), babelqueue.WithObserver(transporttest.NewRecorder(), tc.obs),
				babelqueue.WithLogger(slog.New(slog.DiscardHandler)))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				app.Close(context.Background())
				return
			}
			if !errors.Is(err, babelqueue.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidOption with %q", err, tc.want)
			}
		})
	}
}

func TestPublishMiddlewarePrepareAndHook(t *testing.T) {
	tr := memory.New()
	rec := newHarness(t, tr).rec
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	app.UsePublish(func(next babelqueue.PublishFunc) babelqueue.PublishFunc {
		return func(ctx context.Context, m *babelqueue.Outgoing) error {
			m.Headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			m.Envelope.Data = json.RawMessage(`{"email":"<protected>"}`)
			return next(ctx, m)
		}
	})
	ctx := context.Background()
	id, err := app.Publish(ctx, urn, map[string]string{"email": "a@b.c"})
	if err != nil {
		t.Fatal(err)
	}
	got := tr.Messages("orders")
	if len(got) != 1 || got[0].Headers["traceparent"] == "" || !strings.Contains(string(got[0].Body), `"data":{"email":"<protected>"}`) ||
		!strings.Contains(string(got[0].Body), id) {
		t.Fatalf("published %+v", got)
	}
	if len(rec.Published) != 1 || rec.Published[0].ID != id || rec.Published[0].BodySize != len(got[0].Body) || rec.Published[0].Err != nil {
		t.Errorf("publish hook saw %+v", rec.Published)
	}
	m, err := app.Prepare(ctx, urn, map[string]int{"n": 1}, babelqueue.WithKey([]byte{}), babelqueue.ToQueue("other"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Queue != "other" || m.Key == nil || len(m.Key) != 0 || m.Headers["traceparent"] == "" || m.Projection.URN != urn ||
		!strings.Contains(string(m.Body), `"data":{"email":"<protected>"}`) {
		t.Errorf("prepared %+v", m)
	}
	if len(tr.Messages("other")) != 0 || len(rec.Published) != 1 {
		t.Error("Prepare sent the message")
	}
}

func TestHandlerPublishContinuesTheTrace(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr)
	h.app.Handle(urn, func(ctx context.Context, m *babelqueue.Message) error {
		if babelqueue.MessageFromContext(ctx) != m {
			return errors.New("the handler's context does not carry its message")
		}
		_, err := h.app.Publish(ctx, "urn:babel:invoices:requested", map[string]int{"n": 1}, babelqueue.ToQueue("invoices"))
		return err
	})
	h.inject(good, memory.Stored{})
	h.run()
	if ev := h.rec.WaitSettled(t, 1, 10*time.Second)[0]; ev.Action != babelqueue.ActionAck {
		t.Fatalf("settled %s: %v", ev.Action, ev.Cause)
	}
	h.stop()
	out := tr.Messages("invoices")
	if len(out) != 1 || !strings.Contains(string(out[0].Body), `"trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"`) {
		t.Errorf("the handler's publish did not continue the trace: %v", bodies(out))
	}
}

func TestHandlerGetsCopiesOfHeadersAndKey(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithRetryTiers(time.Hour))
	h.app.Handle(urn, func(_ context.Context, m *babelqueue.Message) error {
		hd := m.Headers()
		hd["traceparent"] = "forged"
		hd["extra"] = "x"
		k := m.Key()
		k[0] = 'X'
		if m.Header("traceparent") != "tp" || m.IsReplay() {
			return errors.New("header view wrong")
		}
		return errors.New("retry me")
	})
	h.inject(good, memory.Stored{Key: []byte("k1"), Headers: map[string]string{"traceparent": "tp"}})
	h.run()
	h.rec.WaitSettled(t, 1, 10*time.Second)
	h.stop()
	got := tr.Messages("orders")
	if len(got) != 1 || string(got[0].Key) != "k1" || len(got[0].Headers) != 1 || got[0].Headers["traceparent"] != "tp" {
		t.Errorf("the retry carried the handler's edits: key %q headers %v", got[0].Key, got[0].Headers)
	}
}

func TestReplayIsVisibleToTheHandler(t *testing.T) {
	h := newHarness(t, memory.New())
	var sent, replay bool
	h.app.Handle(urn, func(ctx context.Context, _ *babelqueue.Message) error {
		replay = babelqueue.IsReplay(ctx)
		return babelqueue.UnlessReplay(ctx, func() error { sent = true; return nil })
	})
	h.inject(good, memory.Stored{Headers: map[string]string{babelqueue.ReplayBypassHeader: "1"}})
	h.run()
	h.rec.WaitSettled(t, 1, 10*time.Second)
	h.stop()
	if !replay || sent {
		t.Errorf("replay=%v side effect ran=%v; want a replay and no side effect", replay, sent)
	}
}

func TestCloseOwnership(t *testing.T) {
	ctx := context.Background()
	tr := memory.New()
	app, _ := babelqueue.New(tr)
	if err := app.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: "q", Body: []byte(good)}); err != nil {
		t.Errorf("Close closed a transport the caller injected: %v", err)
	}
	if _, err := app.Publish(ctx, urn, map[string]int{}); !errors.Is(err, babelqueue.ErrClosed) {
		t.Errorf("publish after Close: %v", err)
	}
	opened, err := babelqueue.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	tr2 := opened.Transport()
	_ = opened.Close(ctx)
	if err := tr2.Publish(ctx, &transport.Message{Queue: "q", Body: []byte(good)}); !errors.Is(err, babelqueue.ErrClosed) {
		t.Errorf("a transport opened by URL should be closed with the app, and say ErrClosed: %v", err)
	}
}

func TestPanicErrorUnwraps(t *testing.T) {
	sentinel := errors.New("db gone")
	h := newHarness(t, memory.New(), babelqueue.WithRetryTiers(time.Hour))
	h.app.Handle(urn, func(context.Context, *babelqueue.Message) error { panic(fmt.Errorf("wrapped: %w", sentinel)) })
	h.inject(good, memory.Stored{})
	h.run()
	ev := h.rec.WaitSettled(t, 1, 10*time.Second)[0]
	h.stop()
	var pe *babelqueue.PanicError
	if !errors.As(ev.Cause, &pe) || !errors.Is(ev.Cause, sentinel) || len(pe.Stack) == 0 {
		t.Errorf("cause %v: want a PanicError that unwraps to the panic value", ev.Cause)
	}
}

// flaky fails the first receives of its consumer, as a broker that went away does.
type flaky struct {
	transport.Transport
	fails int
}

func (f *flaky) Consume(ctx context.Context, q string, o transport.ConsumeOptions) (transport.Consumer, error) {
	c, err := f.Transport.Consume(ctx, q, o)
	return &flakyConsumer{Consumer: c, fails: f.fails}, err
}

type flakyConsumer struct {
	transport.Consumer
	mu    sync.Mutex
	fails int
}

func (c *flakyConsumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	c.mu.Lock()
	fail := c.fails > 0
	c.fails--
	c.mu.Unlock()
	if fail {
		return nil, errors.New("connection refused")
	}
	return c.Consumer.Receive(ctx)
}

func TestHealthAndReceiveErrors(t *testing.T) {
	mem := memory.New()
	h := newHarness(t, mem)
	h.app, _ = babelqueue.New(&flaky{Transport: mem, fails: 2}, babelqueue.WithQueue("orders"), babelqueue.WithObserver(h.rec),
		babelqueue.WithLogger(h.app.Logger()))
	if hl := h.app.Health(); hl.Running || hl.Consuming {
		t.Errorf("health before Run: %+v", hl)
	}
	gate := make(chan struct{})
	h.app.Handle(urn, func(context.Context, *babelqueue.Message) error { <-gate; return nil })
	h.inject(good, memory.Stored{})
	h.run()
	deadline := time.Now().Add(10 * time.Second)
	for !h.app.Health().Consuming && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	hl := h.app.Health()
	close(gate)
	h.rec.WaitSettled(t, 1, 10*time.Second)
	h.stop()
	if !hl.Running || !hl.Consuming || hl.LastReceiveError == nil || hl.LastReceived.IsZero() {
		t.Errorf("health while consuming after two failed receives: %+v", hl)
	}
	if len(h.rec.ReceiveErrors) != 2 || h.rec.ReceiveErrors[1].Backoff <= h.rec.ReceiveErrors[0].Backoff {
		t.Errorf("receive errors %+v: want two, the second with a longer backoff", h.rec.ReceiveErrors)
	}
	if hl := h.app.Health(); hl.Running || hl.Consuming {
		t.Errorf("health after Run: %+v", hl)
	}
}
