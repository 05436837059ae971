package babelqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// Open an app on a broker URL, register a typed handler, publish, and consume until
// the work is done.
func Example() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "memory://",
		babelqueue.WithQueue("orders"),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)

	type order struct {
		OrderID int `json:"order_id"`
	}
	done := make(chan struct{})
	babelqueue.Handle(app, "urn:babel:orders:created", func(_ context.Context, o order, m *babelqueue.Message) error {
		fmt.Printf("order %d, attempts %d\n", o.OrderID, m.Attempts)
		close(done)
		return nil
	})
	if _, err := app.Publish(ctx, "urn:babel:orders:created", order{OrderID: 1042}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() { <-done; stop() }()
	if err := app.Run(runCtx); err != nil {
		panic(err)
	}
	// Output: order 1042, attempts 0
}

// A failing handler is retried with attempts+1, then dead-lettered with a
// dead_letter block beside the original envelope.
func ExampleWithDeadLetter() {
	ctx := context.Background()
	broker := memory.New() // a shared in-process broker, to look inside afterwards
	app, err := babelqueue.New(broker,
		babelqueue.WithQueue("orders"),
		babelqueue.WithMaxAttempts(2),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		return errors.New("payment gateway timeout")
	})
	if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": 1042}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		for len(broker.Messages(app.DeadLetterQueue())) == 0 {
			time.Sleep(time.Millisecond)
		}
		stop()
	}()
	_ = app.Run(runCtx)
	fmt.Println(app.DeadLetterQueue(), len(broker.Messages(app.DeadLetterQueue())))
	// Output: orders.dlq 1
}

// The settlement rules are one pure function: what happens to a delivery is a
// function of what became of it, the options and the broker's capabilities.
func ExampleDecide() {
	p := babelqueue.Policy{MaxAttempts: 3, DeadLetter: true}
	for attempts := range 3 {
		d := babelqueue.Decide(babelqueue.Facts{Kind: babelqueue.Failed, Attempts: attempts}, p, memory.New().Capabilities())
		fmt.Println(attempts, d.Action, d.Attempts)
	}
	// Output:
	// 0 retry 1
	// 1 retry 2
	// 2 dead_letter 3
}
