package fieldcrypt_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/fieldcrypt"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// wire builds an app on broker with schema checks and field encryption on both sides,
// in the documented order.
func wire(t *testing.T, broker *memory.Transport, c fieldcrypt.Cipher, opts ...babelqueue.Option) (*babelqueue.App, *transporttest.Recorder) {
	t.Helper()
	rec := transporttest.NewRecorder()
	opts = append([]babelqueue.Option{
		babelqueue.WithQueue("identity"),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithMaxAttempts(5),
		babelqueue.WithObserver(rec),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, opts...)
	app, err := babelqueue.New(broker, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	reg := registry(t)
	fields := newFields(t, reg, c)
	app.UsePublish(schema.PublishCheck(reg), fields.Protect)
	app.Use(fields.Unprotect, schema.Middleware(reg))
	return app, rec
}

// TestMiddlewareRoundTrip: the broker holds ciphertext only; the handler, and the
// message in its context, see the cleartext.
func TestMiddlewareRoundTrip(t *testing.T) {
	broker := memory.New()
	app, rec := wire(t, broker, newCipher(t, newKey(t, "k1")))
	var (
		mu            sync.Mutex
		seen, fromCtx []byte
		sameTrace     bool
	)
	app.Handle(usersURN, func(ctx context.Context, m *babelqueue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append([]byte{}, m.Envelope.Data...)
		fromCtx = append([]byte{}, babelqueue.MessageFromContext(ctx).Envelope.Data...)
		sameTrace = babelqueue.MessageFromContext(ctx).TraceID() == m.TraceID()
		return nil
	})
	if _, err := app.Publish(context.Background(), usersURN, json.RawMessage(userData)); err != nil {
		t.Fatal(err)
	}
	onBroker := broker.Messages("identity")
	if len(onBroker) != 1 {
		t.Fatalf("%d messages on the broker", len(onBroker))
	}
	for _, s := range secrets {
		if bytes.Contains(onBroker[0].Body, []byte(s)) {
			t.Fatalf("%q is in clear on the broker: %s", s, onBroker[0].Body)
		}
	}
	if ev := schematest.RunUntilSettled(t, app, rec, 1)[0]; ev.Action != babelqueue.ActionAck {
		t.Fatalf("settled %s/%s: %v", ev.Kind, ev.Action, ev.Cause)
	}
	mu.Lock()
	defer mu.Unlock()
	assertSameJSON(t, seen, []byte(userData))
	assertSameJSON(t, fromCtx, []byte(userData))
	if !sameTrace {
		t.Fatal("the message in the context is another message")
	}
}

// TestMiddlewareWrongKey: a consumer without the key dead-letters the delivery at once,
// still encrypted, and the handler never sees it.
func TestMiddlewareWrongKey(t *testing.T) {
	broker := memory.New()
	k1 := newKey(t, "k1")
	producer, _ := wire(t, broker, newCipher(t, k1))
	if _, err := producer.Publish(context.Background(), usersURN, json.RawMessage(userData)); err != nil {
		t.Fatal(err)
	}
	consumer, rec := wire(t, broker, newCipher(t, newKey(t, "k2")))
	called := false
	consumer.Handle(usersURN, func(context.Context, *babelqueue.Message) error { called = true; return nil })
	ev := schematest.RunUntilSettled(t, consumer, rec, 1)[0]
	var de *fieldcrypt.DecryptError
	if ev.Action != babelqueue.ActionDeadLetter || ev.Attempts != 1 || !errors.As(ev.Cause, &de) {
		t.Fatalf("settled %s/%s attempts %d: %v", ev.Kind, ev.Action, ev.Attempts, ev.Cause)
	}
	if called {
		t.Fatal("the handler ran")
	}
	dlq := broker.Messages(consumer.DeadLetterQueue())
	if len(dlq) != 1 {
		t.Fatalf("%d on the DLQ", len(dlq))
	}
	var body struct {
		Data       json.RawMessage        `json:"data"`
		DeadLetter struct{ Error string } `json:"dead_letter"`
	}
	if err := json.Unmarshal(dlq[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body.DeadLetter.Error, "does not decrypt") {
		t.Fatalf("dead_letter.error %q", body.DeadLetter.Error)
	}
	// The dead-lettered data is still the ciphertext, readable with the right key.
	plain, err := newFields(t, registry(t), newCipher(t, k1)).UnprotectData(context.Background(), usersURN, body.Data)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, plain, []byte(userData))
	for _, s := range secrets {
		if bytes.Contains(dlq[0].Body, []byte(s)) {
			t.Fatalf("%q is in clear on the DLQ", s)
		}
	}
}

// TestValidationSeesCleartext: the schema constrains a sensitive field (email format);
// producer and consumer both validate the cleartext, not the ciphertext.
func TestValidationSeesCleartext(t *testing.T) {
	broker := memory.New()
	app, rec := wire(t, broker, newCipher(t, newKey(t, "k1")))
	app.Handle(usersURN, func(context.Context, *babelqueue.Message) error { return nil })
	_, err := app.Publish(context.Background(), usersURN, map[string]any{"user_id": 1, "email": "not-an-email"})
	var ve *schema.ValidationError
	if !errors.As(err, &ve) || ve.Pointer != "/email" || strings.Contains(err.Error(), "not-an-email") {
		t.Fatalf("Publish: %v", err)
	}
	if _, err := app.Publish(context.Background(), usersURN, map[string]any{"user_id": 1, "email": "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	if ev := schematest.RunUntilSettled(t, app, rec, 1)[0]; ev.Action != babelqueue.ActionAck {
		t.Fatalf("settled %s/%s: %v", ev.Kind, ev.Action, ev.Cause)
	}
}
