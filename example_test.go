package babelqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// Middleware wraps handlers as net/http middleware wraps http.Handlers; an observer is
// told what the runtime did with every delivery.
func ExampleApp_Use() {
	ctx := context.Background()
	outcomes := &outcomeLog{}
	app, err := babelqueue.Open(ctx, "memory://",
		babelqueue.WithQueue("orders"),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithObserver(outcomes),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)

	logged := func(name string) babelqueue.Middleware {
		return func(next babelqueue.Handler) babelqueue.Handler {
			return func(ctx context.Context, m *babelqueue.Message) error {
				fmt.Println(name, "before")
				err := next(ctx, m)
				fmt.Println(name, "after")
				return err
			}
		}
	}
	app.Use(logged("app-wide"))
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		fmt.Println("handler")
		// Retrying will not help: straight to the dead-letter queue.
		return babelqueue.NoRetry(errors.New("order 1042 has no lines"))
	}, logged("per-handler"))

	if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": 1042}); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	outcomes.onSettled = stop
	_ = app.Run(runCtx)
	// Output:
	// app-wide before
	// per-handler before
	// handler
	// per-handler after
	// app-wide after
	// settled unretryable: dead_letter to orders.dlq (reason failed, attempts 1)
}

// outcomeLog is an Observer that implements one hook.
type outcomeLog struct{ onSettled func() }

func (o *outcomeLog) OnSettled(_ context.Context, e babelqueue.SettledEvent) {
	fmt.Printf("settled %s: %s to %s (reason %s, attempts %d)\n", e.Kind, e.Action, e.Writes[0].Queue, e.Reason, e.Attempts)
	o.onSettled()
}

// A typed handler binds its data with encoding/json unless the app is given another
// decoder: here encoding/json refusing members the struct does not declare, so a
// producer's misspelt field is dead-lettered instead of being silently dropped. A
// drop-in faster decoder (github.com/goccy/go-json's Unmarshal) is set the same way.
func ExampleWithUnmarshal() {
	ctx := context.Background()
	strict := func(data []byte, v any) error {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	broker := memory.New()
	app, err := babelqueue.New(broker,
		babelqueue.WithQueue("orders"),
		babelqueue.WithUnmarshal(strict),
		babelqueue.WithMaxAttempts(1),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	type order struct {
		OrderID int `json:"order_id"`
	}
	babelqueue.Handle(app, "urn:babel:orders:created", func(_ context.Context, o order, _ *babelqueue.Message) error {
		fmt.Println("order", o.OrderID)
		return nil
	})
	for _, data := range []map[string]any{{"order_id": 1042}, {"order_id": 1043, "ordre_note": "gift"}} {
		if _, err := app.Publish(ctx, "urn:babel:orders:created", data); err != nil {
			panic(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		for len(broker.Messages(app.DeadLetterQueue())) == 0 {
			time.Sleep(time.Millisecond)
		}
		stop()
	}()
	_ = app.Run(runCtx)
	fmt.Println("dead-lettered:", len(broker.Messages(app.DeadLetterQueue())))
	// Output:
	// order 1042
	// dead-lettered: 1
}
