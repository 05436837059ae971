package babelqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

type publishedLog struct {
	mu  sync.Mutex
	evs []babelqueue.PublishedEvent
}

func (l *publishedLog) OnPublished(_ context.Context, ev babelqueue.PublishedEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func batchApp(t *testing.T, tr transport.Transport, opts ...babelqueue.Option) *babelqueue.App {
	t.Helper()
	app, err := babelqueue.New(tr, append([]babelqueue.Option{babelqueue.WithQueue("orders"),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	return app
}

// TestPublishBatchConfirmsEveryMessage: every entry is built as Publish builds it (the
// publish middleware adds a header, a handler's trace is continued, ToQueue is kept),
// lands on its queue in order, and the hook hears of each.
func TestPublishBatchConfirmsEveryMessage(t *testing.T) {
	tr := memory.New()
	hooks := &publishedLog{}
	app := batchApp(t, tr, babelqueue.WithObserver(hooks))
	app.UsePublish(func(next babelqueue.PublishFunc) babelqueue.PublishFunc {
		return func(ctx context.Context, o *babelqueue.Outgoing) error {
			o.Headers["x-tenant"] = "acme"
			return next(ctx, o)
		}
	})
	entries := []babelqueue.BatchEntry{
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 1}},
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 2}, Options: []babelqueue.PublishOption{babelqueue.ContinueTrace("trace-1")}},
		{URN: "urn:babel:orders:shipped", Data: map[string]int{"order_id": 1}, Options: []babelqueue.PublishOption{babelqueue.ToQueue("shipping")}},
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 3}},
	}
	ids, err := app.PublishBatch(context.Background(), entries)
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	if len(ids) != 4 || slices.Contains(ids, "") {
		t.Fatalf("ids %q, want four", ids)
	}
	orders, shipping := tr.Messages("orders"), tr.Messages("shipping")
	if len(orders) != 3 || len(shipping) != 1 {
		t.Fatalf("%d messages on orders, %d on shipping; want 3 and 1", len(orders), len(shipping))
	}
	for k, want := range []int{0, 1, 3} {
		env, err := envelope.Decode(orders[k].Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Meta.ID != ids[want] || orders[k].Headers["x-tenant"] != "acme" {
			t.Errorf("orders[%d]: id %s headers %v, want id %s and the middleware's header", k, env.Meta.ID, orders[k].Headers, ids[want])
		}
		if want == 1 && env.TraceID != "trace-1" {
			t.Errorf("trace_id %q, want trace-1", env.TraceID)
		}
	}
	if len(hooks.evs) != 4 {
		t.Fatalf("the publish hook heard %d messages, want 4", len(hooks.evs))
	}
	for i, ev := range hooks.evs {
		if ev.ID != ids[i] || ev.Err != nil {
			t.Errorf("hook event %d: %+v", i, ev)
		}
	}
}

// TestPublishBatchReportsEveryFailure: an entry that cannot be built and one the broker
// refuses are reported at their indexes, with the entries the transport did not send
// after the refusal; the others are on the queue. No message is lost unreported.
func TestPublishBatchReportsEveryFailure(t *testing.T) {
	tr := memory.New()
	hooks := &publishedLog{}
	app := batchApp(t, tr, babelqueue.WithObserver(hooks))
	tr.FailWrites(func(m *transport.Message) error {
		if strings.Contains(string(m.Body), `"refuse":true`) {
			return errors.New("refused by the test")
		}
		return nil
	})
	entries := []babelqueue.BatchEntry{
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 1}},
		{URN: "urn:babel:orders:created", Data: 42}, // not an object: cannot be built
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 2}},
		{URN: "urn:babel:orders:created", Data: map[string]bool{"refuse": true}},
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 3}},
	}
	ids, err := app.PublishBatch(context.Background(), entries)
	var be *transport.BatchError
	if !errors.As(err, &be) || !errors.Is(err, transport.ErrNotConfirmed) {
		t.Fatalf("PublishBatch: %v, want a *transport.BatchError", err)
	}
	if got := be.Failed(); !slices.Equal(got, []int{1, 3, 4}) {
		t.Fatalf("failed %v, want [1 3 4] (built wrong, refused, not sent after the refusal)", got)
	}
	if !errors.Is(be.Errs[4], transport.ErrNotAttempted) || !strings.Contains(be.Errs[3].Error(), "refused by the test") {
		t.Errorf("causes %v / %v", be.Errs[3], be.Errs[4])
	}
	if ids[1] != "" || ids[0] == "" || ids[3] == "" {
		t.Errorf("ids %q: want none for the entry not built, one for every message sent", ids)
	}
	if got := len(tr.Messages("orders")); got != 2 {
		t.Errorf("%d messages on the queue, want 2", got)
	}
	if len(hooks.evs) != 4 || hooks.evs[2].Err == nil || hooks.evs[1].Err != nil {
		t.Errorf("hook events %+v, want four (the built ones), the refused one with its error", hooks.evs)
	}
}

// unconfirmed is a transport that neither confirms its publishes nor batches them.
type unconfirmed struct{ *memory.Transport }

func (u unconfirmed) Capabilities() transport.Capabilities {
	c := u.Transport.Capabilities()
	c.PublishConfirmed = false
	return c
}

func TestPublishBatchRefusedUpFront(t *testing.T) {
	tr := memory.New()
	app := batchApp(t, unconfirmed{tr})
	_, err := app.PublishBatch(context.Background(), []babelqueue.BatchEntry{{URN: "urn:babel:orders:created", Data: map[string]int{}}})
	if !errors.Is(err, transport.ErrUnsupported) {
		t.Fatalf("PublishBatch on a transport that cannot confirm: %v, want ErrUnsupported", err)
	}
	if n := len(tr.Messages("orders")); n != 0 {
		t.Fatalf("%d messages sent, want none", n)
	}
	if err := app.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := app.PublishBatch(context.Background(), nil); !errors.Is(err, babelqueue.ErrClosed) {
		t.Fatalf("PublishBatch on a closed app: %v, want ErrClosed", err)
	}
}

// Publish a batch with the broker's confirmation: one round trip for the batch; every
// message is either confirmed or reported at its index.
func ExampleApp_PublishBatch() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "memory://", babelqueue.WithQueue("orders"))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)
	ids, err := app.PublishBatch(ctx, []babelqueue.BatchEntry{
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 1}},
		{URN: "urn:babel:orders:created", Data: map[string]int{"order_id": 2}},
	})
	var be *transport.BatchError
	switch {
	case errors.As(err, &be):
		for _, i := range be.Failed() {
			fmt.Println("not confirmed:", i, be.Errs[i])
		}
	case err != nil:
		panic(err)
	}
	fmt.Println(len(ids), "published")
	// Output: 2 published
}
