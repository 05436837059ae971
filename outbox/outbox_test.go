package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newApp(t *testing.T, tr transport.Transport) *babelqueue.App {
	t.Helper()
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// Write stores what Publish would send: the same body bytes (envelope after the publish
// middleware), queue, key (nil and empty kept apart), headers and projection; the relay
// publishes exactly that.
func TestWriteStoresWhatPublishWouldSend(t *testing.T) {
	ctx := context.Background()
	tr := memory.New()
	app := newApp(t, tr)
	app.UsePublish(func(next babelqueue.PublishFunc) babelqueue.PublishFunc {
		return func(ctx context.Context, o *babelqueue.Outgoing) error {
			o.Headers["x-tenant"] = "acme"
			return next(ctx, o)
		}
	})
	store := outbox.NewMemoryStore()
	w := outbox.NewWriter(app, store)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	keys := [][]byte{nil, {}, []byte("order-1042"), {0x00, 0xff}}
	var ids []string
	for i, k := range keys {
		id, err := w.Write(ctx, nil, "urn:babel:orders:paid", map[string]int{"n": i},
			babelqueue.WithKey(k), babelqueue.WithHeaders(map[string]string{"traceparent": tp}), babelqueue.ContinueTrace("trace-1"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if n := len(tr.Messages("orders")); n != 0 {
		t.Fatalf("Write published %d messages; it must publish nothing", n)
	}
	relay := outbox.NewRelay(store, tr, outbox.WithLogger(quiet()))
	res, err := relay.Drain(ctx)
	if err != nil || res.Published != len(keys) {
		t.Fatalf("Drain: %+v, %v", res, err)
	}
	got := tr.Messages("orders")
	if len(got) != len(keys) {
		t.Fatalf("%d messages on the broker, want %d", len(got), len(keys))
	}
	for i, s := range got {
		env, err := envelope.Decode(s.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Meta.ID != ids[i] || env.TraceID != "trace-1" || env.Meta.Queue != "orders" {
			t.Errorf("message %d: id %q trace %q queue %q; want %q trace-1 orders", i, env.Meta.ID, env.TraceID, env.Meta.Queue, ids[i])
		}
		if !bytes.Equal(s.Key, keys[i]) || (s.Key == nil) != (keys[i] == nil) {
			t.Errorf("message %d: key %q (nil %v), want %q (nil %v)", i, s.Key, s.Key == nil, keys[i], keys[i] == nil)
		}
		if s.Headers["traceparent"] != tp || s.Headers["x-tenant"] != "acme" {
			t.Errorf("message %d: headers %v", i, s.Headers)
		}
	}

	// Byte for byte: what Publish sends for the same envelope is what the relay sent.
	direct := memory.New()
	m, err := newApp(t, direct).Prepare(ctx, "urn:babel:orders:paid", map[string]int{"n": 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	if d := direct.Messages("orders")[0]; !bytes.Equal(d.Body, m.Body) {
		t.Fatalf("Prepare's body is not what the broker got")
	}
}

// A row the broker does not confirm is failed with one attempt more and a backoff, and
// goes out once the broker takes it; it is never dropped.
func TestFailedRowsBackOffAndRetry(t *testing.T) {
	ctx := context.Background()
	tr := memory.New()
	store := outbox.NewMemoryStore()
	w := outbox.NewWriter(newApp(t, tr), store)
	for i := range 3 {
		if _, err := w.Write(ctx, nil, "urn:babel:t:x", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	down := errors.New("broker down")
	var mu sync.Mutex
	failing := true
	tr.FailWrites(func(*transport.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return down
		}
		return nil
	})
	var asked []int
	relay := outbox.NewRelay(store, tr, outbox.WithLogger(quiet()), outbox.WithBackoff(func(n int) time.Duration {
		asked = append(asked, n)
		return 30 * time.Millisecond
	}))
	b, err := relay.RelayOnce(ctx)
	if err != nil || b.Failed != 3 || b.Published != 0 {
		t.Fatalf("first batch: %+v, %v; want 3 failed", b, err)
	}
	if !slices.Equal(asked, []int{1, 1, 1}) {
		t.Fatalf("backoff asked for %v, want the first attempt of each row", asked)
	}
	attempts, lastErr, ok := store.Attempts(1)
	if !ok || attempts != 1 || !strings.Contains(lastErr, "broker down") {
		t.Fatalf("row 1: attempts %d, last error %q, pending %v", attempts, lastErr, ok)
	}
	// Not due yet: nothing is claimed.
	if b, _ := relay.RelayOnce(ctx); b.Claimed != 0 {
		t.Fatalf("rows in their backoff were claimed: %+v", b)
	}
	time.Sleep(40 * time.Millisecond)
	mu.Lock()
	failing = false
	mu.Unlock()
	if b, err := relay.RelayOnce(ctx); err != nil || b.Published != 3 {
		t.Fatalf("after the backoff: %+v, %v", b, err)
	}
	if n := len(tr.Messages("orders")); n != 3 {
		t.Fatalf("%d on the broker, want 3", n)
	}
	if n, _ := store.Pending(ctx); n != 0 {
		t.Fatalf("%d rows pending, want 0", n)
	}
	st := relay.Stats()
	if st.Published != 3 || st.Failed != 3 || !strings.Contains(st.LastError, "broker down") {
		t.Fatalf("stats %+v", st)
	}
}

// A keyed row is not claimed while an earlier row of its key is held by another claim
// or waits for its backoff; other keys go on.
func TestPerKeyOrderAcrossClaims(t *testing.T) {
	ctx := context.Background()
	store := outbox.NewMemoryStore()
	save := func(key string, n int) {
		m := &transport.Message{Queue: "q", Body: []byte(fmt.Sprint(n)), Key: []byte(key)}
		if key == "" {
			m.Key = nil
		}
		if err := store.Save(ctx, nil, m); err != nil {
			t.Fatal(err)
		}
	}
	save("a", 1)
	save("b", 2)
	save("a", 3)
	save("", 4)
	save("b", 5)
	first, err := store.Claim(ctx, 2) // rows 1 (a) and 2 (b)
	if err != nil {
		t.Fatal(err)
	}
	second, err := store.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range second.Records() {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, []int64{4}) {
		t.Fatalf("second claim took %v while a and b are held; want only the unkeyed row 4", got)
	}
	_ = second.Rollback(ctx)
	// Row 1 fails (backoff), row 2 is published: b's next row may go, a's may not.
	if err := first.Commit(ctx, outbox.Result{Published: []int64{2}, Failed: []outbox.Failure{{ID: 1, Err: "x", RetryIn: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	third, _ := store.Claim(ctx, 10)
	got = got[:0]
	for _, r := range third.Records() {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("claim after a's head failed took %v, want [4 5]", got)
	}
	if err := third.Commit(ctx, outbox.Result{}); err != nil {
		t.Fatal(err)
	}
	if err := third.Rollback(ctx); err == nil {
		t.Fatal("a claim ended twice without an error")
	}
}

// Run stops when its context ends, after finishing the batch it is publishing; and it
// relays rows written while it runs.
func TestRunStopsGracefully(t *testing.T) {
	tr := memory.New()
	store := outbox.NewMemoryStore()
	w := outbox.NewWriter(newApp(t, tr), store)
	relay := outbox.NewRelay(store, tr, outbox.WithLogger(quiet()), outbox.WithPollInterval(5*time.Millisecond), outbox.WithBatchSize(7))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	for i := range 50 {
		if _, err := w.Write(context.Background(), nil, "urn:babel:t:x", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(tr.Messages("orders")) < 50 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	msgs := tr.Messages("orders")
	if len(msgs) != 50 {
		t.Fatalf("%d messages published, want 50", len(msgs))
	}
	for i, m := range msgs {
		env, err := envelope.Decode(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"n":%d}`, i); string(env.Data) != want {
			t.Fatalf("message %d carries %s, want %s (out of order)", i, env.Data, want)
		}
	}
}

// noConfirm is a transport whose Publish does not wait for the broker.
type noConfirm struct{ transport.Transport }

func (noConfirm) Capabilities() transport.Capabilities { return transport.Capabilities{} }

func TestRelayRefusesUnconfirmedTransport(t *testing.T) {
	relay := outbox.NewRelay(outbox.NewMemoryStore(), noConfirm{memory.New()})
	if err := relay.Run(context.Background()); !errors.Is(err, outbox.ErrNotConfirming) {
		t.Fatalf("Run with a fire-and-forget transport: %v, want ErrNotConfirming", err)
	}
	if _, err := relay.RelayOnce(context.Background()); !errors.Is(err, outbox.ErrNotConfirming) {
		t.Fatalf("RelayOnce with a fire-and-forget transport: %v", err)
	}
}

func TestWriteErrors(t *testing.T) {
	ctx := context.Background()
	var w *outbox.Writer
	if _, err := w.Write(ctx, nil, "urn:babel:t:x", nil); !errors.Is(err, outbox.ErrNoStore) {
		t.Fatalf("nil writer: %v", err)
	}
	tr := memory.New()
	store := outbox.NewMemoryStore()
	w = outbox.NewWriter(newApp(t, tr), store)
	if _, err := w.Write(ctx, nil, "urn:babel:t:x", "not an object"); err == nil {
		t.Fatal("data that is not an object was stored")
	}
	if _, err := w.Write(ctx, nil, "urn:babel:t:x", nil, babelqueue.ToQueue("")); !errors.Is(err, babelqueue.ErrInvalidOption) {
		t.Fatalf("empty queue: %v", err)
	}
	if n, _ := store.Pending(ctx); n != 0 {
		t.Fatalf("%d rows stored by failed writes", n)
	}
}

// A store error does not stop Run: it is logged and retried.
func TestRunSurvivesStoreErrors(t *testing.T) {
	tr := memory.New()
	inner := outbox.NewMemoryStore()
	store := &flakyStore{MemoryStore: inner, fails: 3}
	w := outbox.NewWriter(newApp(t, tr), inner)
	if _, err := w.Write(context.Background(), nil, "urn:babel:t:x", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(store, tr, outbox.WithLogger(quiet()), outbox.WithPollInterval(time.Millisecond),
		outbox.WithBackoff(func(int) time.Duration { return time.Millisecond }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(tr.Messages("orders")) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(tr.Messages("orders")) != 1 {
		t.Fatal("the row was not published after the store came back")
	}
	if st := relay.Stats(); !strings.Contains(st.LastError, "database is away") {
		t.Fatalf("last error %q", st.LastError)
	}
}

type flakyStore struct {
	*outbox.MemoryStore
	mu    sync.Mutex
	fails int
}

func (s *flakyStore) Claim(ctx context.Context, limit int) (outbox.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		return nil, errors.New("database is away")
	}
	return s.MemoryStore.Claim(ctx, limit)
}
