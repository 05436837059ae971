package babelqueue_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// TestRunStopsWhenTheBrokerRefusesASettleWrite: a user without permission on the
// dead-letter queue (a RabbitMQ vhost permission, an Artemis role, a Kafka ACL) has its
// dead-letter write refused. Every redelivery would run the handler again and be
// refused again, so Run stops with an error matching transport.ErrAuth, naming the
// queue, and the delivery stays on the broker: nothing is lost, nothing loops.
func TestRunStopsWhenTheBrokerRefusesASettleWrite(t *testing.T) {
	mem := memory.New()
	mem.FailWrites(func(m *transport.Message) error {
		if m.Queue == "orders.dlq" {
			return transport.AuthFailure(errors.New("ACCESS_REFUSED - write access to queue 'orders.dlq' refused for user 'app'"))
		}
		return nil
	})
	app, err := babelqueue.New(mem, babelqueue.WithQueue("orders"), babelqueue.WithMaxAttempts(1), babelqueue.WithDeadLetter(true))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	app.Handle(urn, func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	if _, err := app.Publish(context.Background(), urn, map[string]any{"order_id": 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = app.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not stop by itself within 10 s (handler ran %d times)", calls.Load())
	}
	if !errors.Is(err, transport.ErrAuth) {
		t.Fatalf("Run = %v, want an error matching transport.ErrAuth", err)
	}
	if want := `"orders"`; !strings.Contains(err.Error(), want) {
		t.Errorf("Run's error %q does not name the queue %s", err, want)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once (no redelivery loop)", n)
	}
	if got := len(mem.Messages("orders")); got != 1 {
		t.Errorf("%d messages on orders after Run, want the refused one given back", got)
	}
	if got := len(mem.Messages("orders.dlq")); got != 0 {
		t.Errorf("%d messages on orders.dlq, want none", got)
	}
}
