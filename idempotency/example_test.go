package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// settled counts settlements, so the example knows when both deliveries are done.
type settled struct{ n atomic.Int32 }

func (s *settled) OnSettled(context.Context, babelqueue.SettledEvent) { s.n.Add(1) }

// A producer that retried published the same order twice; the handler charges once.
func ExampleMiddleware() {
	ctx := context.Background()
	tr := memory.New()
	obs := &settled{}
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithObserver(obs))
	if err != nil {
		panic(err)
	}

	// A fleet shares a Redis or PostgreSQL store (modules idempotency/redisstore and
	// idempotency/pgstore); one process can keep its ids in memory.
	dedupe, err := idempotency.Middleware(idempotency.NewMemoryStore(24*time.Hour),
		idempotency.WithLease(2*time.Minute))
	if err != nil {
		panic(err)
	}
	app.Use(dedupe)

	var charges atomic.Int32
	app.Handle("urn:babel:orders:created", func(ctx context.Context, m *babelqueue.Message) error {
		charges.Add(1) // the side effect
		return nil
	})

	msg, err := app.Prepare(ctx, "urn:babel:orders:created", map[string]any{"order_id": 42})
	if err != nil {
		panic(err)
	}
	_ = tr.Publish(ctx, msg)
	_ = tr.Publish(ctx, msg) // the same bytes, the same meta.id

	runCtx, stop := context.WithCancel(ctx)
	go func() {
		for obs.n.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		stop()
	}()
	if err := app.Run(runCtx); err != nil {
		panic(err)
	}
	fmt.Println("deliveries:", obs.n.Load(), "charges:", charges.Load())
	// Output: deliveries: 2 charges: 1
}

// Wrap keeps one handler to one effect per meta.id; Forget lets an id run again.
func ExampleWrap() {
	ctx := context.Background()
	store := idempotency.NewMemoryStore(0)
	h, err := idempotency.Wrap(store, func(ctx context.Context, m *babelqueue.Message) error {
		fmt.Println("sending the receipt of", m.ID())
		return nil
	})
	if err != nil {
		panic(err)
	}
	env, err := envelope.Make("urn:babel:orders:created", map[string]any{"order_id": 42},
		envelope.WithID("0b9e6d1c-5f7a-4c39-9a43-2f1d8e6b7c10"))
	if err != nil {
		panic(err)
	}
	m := &babelqueue.Message{Envelope: env}

	_ = h(ctx, m) // runs
	_ = h(ctx, m) // remembered: acknowledged without running
	_ = store.Forget(ctx, m.ID())
	_ = h(ctx, m) // runs again
	// Output:
	// sending the receipt of 0b9e6d1c-5f7a-4c39-9a43-2f1d8e6b7c10
	// sending the receipt of 0b9e6d1c-5f7a-4c39-9a43-2f1d8e6b7c10
}
