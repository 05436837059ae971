package artemis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const gateBody = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":5},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000},"attempts":0}`

// SPEC §6 on Artemis: a bq_schema_version other than "1" is never handed to a handler.
// With the DLQ on the body goes to the DLQ byte for byte; with it off the delivery is
// acknowledged and dropped (Artemis has no hand-off).
func TestRuntimeSchemaGate(t *testing.T) {
	for _, dlqOn := range []bool{true, false} {
		name := "dlq-off"
		if dlqOn {
			name = "dlq-on"
		}
		t.Run(name, func(t *testing.T) {
			q := transporttest.UniqueName("bqtest-gate")
			rawSend(t, q, &amqp.Message{Value: gateBody, ApplicationProperties: map[string]any{"bq_schema_version": "2", "bq_attempts": "0"}})
			rawSend(t, q, &amqp.Message{Value: gateBody, ApplicationProperties: map[string]any{"bq_schema_version": " ", "bq_attempts": "0"}})
			a := openApp(t, q, babelqueue.WithDeadLetter(dlqOn))
			var handled atomic.Int32
			a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
			stop := runApp(t, a)
			deadline := time.Now().Add(30 * time.Second)
			for handled.Load() < 1 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second) // give the rejected one its chance to be (wrongly) handled
			stop()
			// The whitespace-only version passes the gate; "2" never reaches a handler.
			if n := handled.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1 (only the message whose version is blank)", n)
			}
			tr := openTransport(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			transporttest.ExpectNothing(t, c, time.Second)
			_ = c.Close(ctx)
			dc, err := tr.Consume(ctx, a.DeadLetterQueue(), transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = dc.Close(context.Background()) }()
			if !dlqOn {
				transporttest.ExpectNothing(t, dc, time.Second)
				return
			}
			d := transporttest.Receive(t, dc, 30*time.Second)
			if string(d.Body) != gateBody {
				t.Errorf("DLQ body = %q, want the rejected body byte for byte %q", d.Body, gateBody)
			}
			_ = dc.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
		})
	}
}

// Retry tiers wait on the broker (scheduled delivery): the retry is not redelivered
// before its tier, then arrives with attempts 1.
func TestRuntimeRetryTierScheduled(t *testing.T) {
	q := transporttest.UniqueName("bqtest-tier")
	a := openApp(t, q, babelqueue.WithRetryTiers(3*time.Second), babelqueue.WithMaxAttempts(3))
	var calls atomic.Int32
	attempts := make(chan int, 4)
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		attempts <- m.Attempts
		if calls.Add(1) == 1 {
			return errors.New("first try fails")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := a.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": 9}); err != nil {
		t.Fatal(err)
	}
	runApp(t, a)
	select {
	case n := <-attempts:
		if n != 0 {
			t.Fatalf("first delivery attempts = %d", n)
		}
	case <-ctx.Done():
		t.Fatal("never handled")
	}
	select {
	case n := <-attempts:
		t.Fatalf("the retry came back at once (attempts %d), before its 3s tier", n)
	case <-time.After(time.Second):
	}
	select {
	case n := <-attempts:
		if n != 1 {
			t.Errorf("retry attempts = %d, want 1", n)
		}
	case <-ctx.Done():
		t.Fatal("the retry never came")
	}
}
