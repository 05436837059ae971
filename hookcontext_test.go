package babelqueue_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// messageHooks records the message each hook finds in its context.
type messageHooks struct {
	mu       sync.Mutex
	received []*babelqueue.Message
	handled  []*babelqueue.Message
	settled  []*babelqueue.Message
	done     chan struct{}
}

func (h *messageHooks) OnReceive(ctx context.Context, _ babelqueue.DeliveryInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.received = append(h.received, babelqueue.MessageFromContext(ctx))
}

func (h *messageHooks) OnHandled(ctx context.Context, _ babelqueue.HandledEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handled = append(h.handled, babelqueue.MessageFromContext(ctx))
}

func (h *messageHooks) OnSettled(ctx context.Context, _ babelqueue.SettledEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settled = append(h.settled, babelqueue.MessageFromContext(ctx))
	if len(h.settled) == 2 {
		close(h.done)
	}
}

// The hooks of a delivery see the message its handler was given; a poison body has none.
func TestHooksSeeTheDeliverysMessage(t *testing.T) {
	broker := memory.New()
	hooks := &messageHooks{done: make(chan struct{})}
	app, err := babelqueue.New(broker, babelqueue.WithQueue("orders"), babelqueue.WithObserver(hooks),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	var inHandler *babelqueue.Message
	app.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		inHandler = m
		return nil
	})
	if _, err := app.Publish(context.Background(), "urn:babel:orders:created", map[string]int{"order_id": 1}); err != nil {
		t.Fatal(err)
	}
	broker.Inject("orders", memory.Stored{Body: []byte(`not json`)})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	select {
	case <-hooks.done:
	case <-time.After(10 * time.Second):
		t.Fatal("two settlements were not observed")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	if inHandler == nil {
		t.Fatal("the handler did not run")
	}
	if hooks.received[0] != inHandler || hooks.handled[0] != inHandler || hooks.settled[0] != inHandler {
		t.Errorf("hooks saw %p, %p, %p; the handler %p", hooks.received[0], hooks.handled[0], hooks.settled[0], inHandler)
	}
	if hooks.received[1] != nil || hooks.settled[1] != nil {
		t.Errorf("a poison body's hooks saw a message: %v, %v", hooks.received[1], hooks.settled[1])
	}
}

// HandledEvent.Start is when the handler started: after the publish, no later than the
// handler's first line, and the handler's run (Duration) ends before the settlement.
func TestHandledEventStart(t *testing.T) {
	broker := memory.New()
	rec := transporttest.NewRecorder()
	app, err := babelqueue.New(broker, babelqueue.WithQueue("orders"), babelqueue.WithObserver(rec),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	var entered time.Time
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		entered = time.Now()
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	published := time.Now()
	if _, err := app.Publish(context.Background(), "urn:babel:orders:created", map[string]int{"order_id": 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	rec.WaitSettled(t, 1, 10*time.Second)
	settled := time.Now()
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	e := rec.Handled[0]
	if e.Start.Before(published) || e.Start.After(entered) {
		t.Errorf("Start %v, want between the publish (%v) and the handler's first line (%v)", e.Start, published, entered)
	}
	if end := e.Start.Add(e.Duration); e.Duration < 20*time.Millisecond || end.After(settled) {
		t.Errorf("the handler ran %v from %v (settled at %v)", e.Duration, e.Start, settled)
	}
}
