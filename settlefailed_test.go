package babelqueue_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

var errLateWrite = errors.New("test: the pipelined write failed")

// lateFailing is memory:// with consumers that behave as a transport pipelining its
// settle writes whose first write fails after Settle returned: that Ack is accepted
// (nil), the delivery is given back, and ConsumeOptions.SettleFailed is told.
type lateFailing struct{ *memory.Transport }

func (l lateFailing) Consume(ctx context.Context, q string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	c, err := l.Transport.Consume(ctx, q, opts)
	if err != nil {
		return nil, err
	}
	return &lateFailingConsumer{Consumer: c, failed: opts.SettleFailed}, nil
}

type lateFailingConsumer struct {
	transport.Consumer
	failed func(*transport.Delivery, transport.Settlement, error)
	once   sync.Once
}

func (c *lateFailingConsumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	late := false
	if s.Outcome == transport.Ack && len(s.Writes) > 0 {
		c.once.Do(func() { late = true })
	}
	if !late {
		return c.Consumer.Settle(ctx, d, s)
	}
	if err := c.Consumer.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		return err
	}
	if c.failed != nil {
		go c.failed(d, s, errLateWrite)
	}
	return nil
}

// TestSettleFailedHook: a settlement whose writes fail after the transport accepted it
// (pipelined settle writes) is reported to the SettleFailedHook observers with the
// delivery read again, its writes and the error; the delivery comes again and is
// settled then.
func TestSettleFailedHook(t *testing.T) {
	rec := transporttest.NewRecorder()
	app, err := babelqueue.New(lateFailing{memory.New()}, babelqueue.WithQueue("orders"), babelqueue.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	app.Handle(urn, func(context.Context, *babelqueue.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	id, err := app.Publish(context.Background(), urn, map[string]any{"order_id": 1})
	if err != nil {
		t.Fatal(err)
	}
	// The retry the transport accepted, the delivery again (handled, acked).
	settled := rec.WaitSettled(t, 2, 10*time.Second)
	if settled[0].Action != babelqueue.ActionRetry || settled[0].Err != nil {
		t.Fatalf("first settlement %s (err %v), want a retry reported as made", settled[0].Action, settled[0].Err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.SettleFailedEvents()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := rec.SettleFailedEvents()
	if len(got) != 1 {
		t.Fatalf("SettleFailedHook told %d times, want once", len(got))
	}
	e := got[0]
	if e.Delivery.Queue != "orders" || e.Delivery.URN != urn || e.Delivery.ID != id || e.Delivery.Lang != "go" {
		t.Errorf("the failed settlement's delivery: %+v, want orders, %s, id %s, lang go", e.Delivery, urn, id)
	}
	if e.Kind != babelqueue.KindHandled || !errors.Is(e.Err, errLateWrite) {
		t.Errorf("kind %s, err %v; want handled and the write's error", e.Kind, e.Err)
	}
	if len(e.Writes) != 1 || e.Writes[0].Queue != "orders" {
		t.Errorf("writes %+v, want the retry to orders", e.Writes)
	}
	if settled[1].Action != babelqueue.ActionAck || settled[1].Delivery.Attempts != 0 {
		t.Errorf("second settlement %s at attempts %d, want the delivery given back (attempts 0) and acked", settled[1].Action, settled[1].Delivery.Attempts)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
}
