package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const ordersURN = "urn:babel:orders:created"

func newApp(t *testing.T, broker *memory.Transport, logs *transporttest.LogBuffer, opts ...babelqueue.Option) (*babelqueue.App, *transporttest.Recorder) {
	t.Helper()
	rec := transporttest.NewRecorder()
	opts = append([]babelqueue.Option{
		babelqueue.WithQueue("orders"),
		babelqueue.WithObserver(rec),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
	}, opts...)
	app, err := babelqueue.New(broker, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	return app, rec
}

// TestPublishCheck: invalid data never reaches the broker and Publish says why; valid
// data and URNs without a schema are published.
func TestPublishCheck(t *testing.T) {
	broker := memory.New()
	app, _ := newApp(t, broker, &transporttest.LogBuffer{})
	app.UsePublish(schema.PublishCheck(loadExamples(t)))
	ctx := context.Background()

	_, err := app.Publish(ctx, ordersURN, map[string]any{"order_id": 0, "amount": 5})
	var ve *schema.ValidationError
	if !errors.As(err, &ve) || ve.URN != ordersURN || ve.Pointer != "/order_id" || ve.Keyword != "minimum" {
		t.Fatalf("Publish: %v, want the minimum of /order_id", err)
	}
	if n := len(broker.Messages("orders")); n != 0 {
		t.Fatalf("%d messages reached the broker", n)
	}
	if _, err := app.Prepare(ctx, ordersURN, map[string]any{"amount": 5}); !errors.Is(err, schema.ErrInvalid) {
		t.Fatalf("Prepare: %v, want ErrInvalid", err)
	}
	if _, err := app.Publish(ctx, ordersURN, map[string]any{"order_id": 7, "amount": 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Publish(ctx, "urn:babel:no:schema", map[string]any{"anything": true}); err != nil {
		t.Fatal(err)
	}
	if n := len(broker.Messages("orders")); n != 2 {
		t.Fatalf("%d messages on the broker, want 2", n)
	}
}

func invalidOrder(t *testing.T) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(exampleRegistry, "messages", "order-created-invalid.json"))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestMiddlewareDeadLettersOnFirstDelivery: invalid data is not retried, whatever
// max_attempts says; it is dead-lettered at once with the violation, and the handler
// never runs.
func TestMiddlewareDeadLettersOnFirstDelivery(t *testing.T) {
	broker := memory.New()
	app, rec := newApp(t, broker, &transporttest.LogBuffer{}, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(5))
	app.Use(schema.Middleware(loadExamples(t)))
	var calls atomic.Int32
	app.Handle(ordersURN, func(context.Context, *babelqueue.Message) error { calls.Add(1); return nil })
	broker.Inject("orders", memory.Stored{Body: invalidOrder(t)})

	ev := schematest.RunUntilSettled(t, app, rec, 1)[0]
	if ev.Action != babelqueue.ActionDeadLetter || ev.Reason != "failed" {
		t.Fatalf("settled %s/%s (%s), want a dead-letter with reason failed", ev.Kind, ev.Action, ev.Reason)
	}
	if calls.Load() != 0 {
		t.Fatal("the handler ran on invalid data")
	}
	dlq := broker.Messages(app.DeadLetterQueue())
	if len(dlq) != 1 {
		t.Fatalf("%d messages on the DLQ", len(dlq))
	}
	var body struct {
		Data       map[string]any `json:"data"`
		DeadLetter struct {
			Reason string `json:"reason"`
			Error  string `json:"error"`
		} `json:"dead_letter"`
	}
	if err := json.Unmarshal(dlq[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.DeadLetter.Reason != "failed" || !strings.Contains(body.DeadLetter.Error, "/order_id") || !strings.Contains(body.DeadLetter.Error, `"minimum"`) {
		t.Fatalf("dead_letter %+v, want reason failed and the violation", body.DeadLetter)
	}
	if body.Data["order_id"] != float64(0) {
		t.Fatalf("the dead-lettered data changed: %v", body.Data)
	}
	if n := len(broker.Messages("orders")); n != 0 {
		t.Fatalf("%d messages back on the queue: it was retried", n)
	}
}

// TestMiddlewareDropsWithoutDLQ: with dead-lettering off the invalid message is dropped
// and the log says why.
func TestMiddlewareDropsWithoutDLQ(t *testing.T) {
	broker := memory.New()
	logs := &transporttest.LogBuffer{}
	app, rec := newApp(t, broker, logs, babelqueue.WithDeadLetter(false), babelqueue.WithMaxAttempts(5))
	app.Use(schema.Middleware(loadExamples(t)))
	app.Handle(ordersURN, func(context.Context, *babelqueue.Message) error { return nil })
	broker.Inject("orders", memory.Stored{Body: invalidOrder(t)})

	ev := schematest.RunUntilSettled(t, app, rec, 1)[0]
	if ev.Action != babelqueue.ActionDrop {
		t.Fatalf("settled %s/%s, want a drop", ev.Kind, ev.Action)
	}
	if !strings.Contains(logs.String(), "/order_id") || len(broker.Messages("orders")) != 0 {
		t.Fatalf("the log does not name the violation, or the message stayed:\n%s", logs.String())
	}
}

// TestMiddlewarePassesValidAndUnknown: valid data and URNs without a schema reach the
// handler.
func TestMiddlewarePassesValidAndUnknown(t *testing.T) {
	broker := memory.New()
	app, rec := newApp(t, broker, &transporttest.LogBuffer{}, babelqueue.WithDeadLetter(true))
	app.Use(schema.Middleware(loadExamples(t)))
	var calls atomic.Int32
	h := func(context.Context, *babelqueue.Message) error { calls.Add(1); return nil }
	app.Handle(ordersURN, h)
	app.Handle("urn:babel:no:schema", h)
	ctx := context.Background()
	if _, err := app.Publish(ctx, ordersURN, map[string]any{"order_id": 1, "amount": 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Publish(ctx, "urn:babel:no:schema", map[string]any{"order_id": "x"}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range schematest.RunUntilSettled(t, app, rec, 2) {
		if ev.Action != babelqueue.ActionAck {
			t.Fatalf("settled %s/%s: %v", ev.Kind, ev.Action, ev.Cause)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", calls.Load())
	}
}
