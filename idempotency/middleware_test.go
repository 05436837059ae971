package idempotency_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// seenSetOnly is a store that cannot claim.
type seenSetOnly struct{ idempotency.Store }

func TestInvalidOptions(t *testing.T) {
	mem := idempotency.NewMemoryStore(0)
	cases := []struct {
		name  string
		store idempotency.Store
		opts  []idempotency.Option
	}{
		{"nil store", nil, nil},
		{"zero lease", mem, []idempotency.Option{idempotency.WithLease(0)}},
		{"negative held retry", mem, []idempotency.Option{idempotency.WithHeldRetry(-time.Second)}},
		{"zero store timeout", mem, []idempotency.Option{idempotency.WithStoreTimeout(0)}},
		{"unknown mode", mem, []idempotency.Option{idempotency.WithMode(idempotency.Mode(9))}},
		{"nil logger", mem, []idempotency.Option{idempotency.WithLogger(nil)}},
		{"claim mode on a store that cannot claim", seenSetOnly{mem}, []idempotency.Option{idempotency.WithMode(idempotency.ModeClaim)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := idempotency.Middleware(c.store, c.opts...); !errors.Is(err, babelqueue.ErrInvalidOption) {
				t.Fatalf("Middleware: err = %v, want ErrInvalidOption", err)
			}
			h := func(context.Context, *babelqueue.Message) error { return nil }
			if _, err := idempotency.Wrap(c.store, h, c.opts...); !errors.Is(err, babelqueue.ErrInvalidOption) {
				t.Fatalf("Wrap: err = %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := idempotency.Wrap(mem, nil); !errors.Is(err, babelqueue.ErrInvalidOption) {
		t.Fatalf("Wrap of a nil handler: err = %v, want ErrInvalidOption", err)
	}
}

// A store that cannot claim runs the semantics table in seen-set mode (ModeAuto).
func TestSeenSetOnlyStoreKit(t *testing.T) {
	idempotencytest.Run(t, idempotencytest.Config{
		NewStore: func(_ testing.TB, ttl time.Duration) idempotency.Store {
			return seenSetOnly{idempotency.NewMemoryStore(ttl)}
		},
	})
}

// ModeAuto claims on a ClaimStore: a held id is requeued, not run.
func TestAutoModeClaimsWhenTheStoreCan(t *testing.T) {
	ctx := context.Background()
	s := idempotency.NewMemoryStore(0)
	id := idempotencytest.NewID()
	if _, err := s.Claim(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	ran := false
	h, err := idempotency.Wrap(s, func(context.Context, *babelqueue.Message) error { ran = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	err = h(ctx, idempotencytest.Message(t, id))
	var rq *babelqueue.RequeueError
	if ran || !errors.As(err, &rq) || !errors.Is(err, idempotency.ErrHeld) || rq.After != idempotency.DefaultHeldRetry {
		t.Fatalf("ran %v, err %v; want requeued for %s without running", ran, err, idempotency.DefaultHeldRetry)
	}
}

type runtimeHarness struct {
	tr  *memory.Transport
	app *babelqueue.App
	rec *transporttest.Recorder

	mu      sync.Mutex
	effects map[string]int
}

func newRuntime(t *testing.T, s idempotency.Store, opts ...idempotency.Option) *runtimeHarness {
	t.Helper()
	h := &runtimeHarness{tr: memory.New(), rec: transporttest.NewRecorder(), effects: map[string]int{}}
	app, err := babelqueue.New(h.tr, babelqueue.WithQueue("orders"), babelqueue.WithObserver(h.rec),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.Middleware(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	app.Use(mw)
	app.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		h.mu.Lock()
		h.effects[m.ID()]++
		h.mu.Unlock()
		return nil
	})
	h.app = app
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func (h *runtimeHarness) effectsOf(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.effects[id]
}

// publishTwice publishes one envelope twice, byte for byte: a producer's retry.
func (h *runtimeHarness) publishTwice(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	m, err := h.app.Prepare(ctx, "urn:babel:orders:created", map[string]string{"order": "A-1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := h.tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	return m.Projection.MessageID
}

func TestRuntimeDuplicateHasOneEffect(t *testing.T) {
	for _, mode := range []idempotency.Mode{idempotency.ModeClaim, idempotency.ModeSeenSet} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newRuntime(t, idempotency.NewMemoryStore(0), idempotency.WithMode(mode))
			id := h.publishTwice(t)
			evs := h.rec.WaitSettled(t, 2, 10*time.Second)
			for _, e := range evs {
				if e.Kind != babelqueue.KindHandled || e.Action != babelqueue.ActionAck {
					t.Fatalf("settled %s/%s, want both deliveries handled and acknowledged", e.Kind, e.Action)
				}
			}
			if n := h.effectsOf(id); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
		})
	}
}

// A delivery whose id another worker holds is given back to the broker with a delay,
// not run and not lost; once the holder remembers the id it is acknowledged, and once
// the holder's claim is gone it runs.
func TestRuntimeHeldDeliveryComesBack(t *testing.T) {
	ctx := context.Background()
	s := idempotency.NewMemoryStore(0)
	h := newRuntime(t, s, idempotency.WithHeldRetry(100*time.Millisecond))
	m, err := h.app.Prepare(ctx, "urn:babel:orders:created", map[string]string{"order": "A-1"})
	if err != nil {
		t.Fatal(err)
	}
	id := m.Projection.MessageID
	other, err := s.Claim(ctx, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.tr.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	evs := h.rec.WaitSettled(t, 2, 10*time.Second)
	for _, e := range evs[:2] {
		if e.Kind != babelqueue.KindRequeued || e.Action != babelqueue.ActionRelease || len(e.Writes) != 1 ||
			e.Writes[0].Queue != "orders" || e.Writes[0].Delay != 100*time.Millisecond || !errors.Is(e.Cause, idempotency.ErrHeld) {
			t.Fatalf("settled %+v; want requeued to orders with a 100ms delay, cause ErrHeld", e)
		}
	}
	if n := h.effectsOf(id); n != 0 {
		t.Fatalf("%d effects while another worker held the claim, want 0", n)
	}
	if err := s.Release(ctx, id, other.Token); err != nil { // the other worker's handler failed
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.effectsOf(id) == 1 })
	last := h.rec.SettledEvents()
	if e := last[len(last)-1]; e.Kind != babelqueue.KindHandled || e.Action != babelqueue.ActionAck {
		t.Fatalf("last settlement %s/%s, want handled/ack", e.Kind, e.Action)
	}
	if got := h.tr.Messages("orders"); len(got) != 0 {
		t.Fatalf("%d messages left on the queue", len(got))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A store error before the handler is a failed delivery: retried with attempts + 1,
// never acknowledged unrun.
func TestRuntimeStoreErrorIsRetried(t *testing.T) {
	h := newRuntime(t, brokenStore{}, idempotency.WithMode(idempotency.ModeSeenSet))
	id := h.publishTwice(t)
	evs := h.rec.WaitSettled(t, 1, 10*time.Second)
	var se *idempotency.StoreError
	if e := evs[0]; e.Kind != babelqueue.KindFailed || e.Action != babelqueue.ActionRetry || !errors.As(e.Cause, &se) || se.Op != "seen" {
		t.Fatalf("settled %+v; want a failed delivery retried, cause a seen StoreError", e)
	}
	if n := h.effectsOf(id); n != 0 {
		t.Fatalf("%d effects, want none while the store fails", n)
	}
	if ws := evs[0].Writes; len(ws) != 1 || ws[0].Queue != "orders" {
		t.Fatalf("writes %+v, want the retry on orders", ws)
	}
}

type brokenStore struct{}

var errBroken = errors.New("store is down")

func (brokenStore) Seen(context.Context, string) (bool, error) { return false, errBroken }
func (brokenStore) Remember(context.Context, string) error     { return errBroken }
func (brokenStore) Forget(context.Context, string) error       { return errBroken }

var _ transport.Transport = (*memory.Transport)(nil)

// silentStore never answers, as a store whose database connection went silent (open,
// no byte through): each call waits until its context ends.
type silentStore struct{}

func (silentStore) Seen(ctx context.Context, _ string) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}
func (silentStore) Remember(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
func (silentStore) Forget(ctx context.Context, _ string) error   { <-ctx.Done(); return ctx.Err() }
func (silentStore) Claim(ctx context.Context, _ string, _ time.Duration) (idempotency.Claim, error) {
	<-ctx.Done()
	return idempotency.Claim{}, ctx.Err()
}
func (silentStore) Release(ctx context.Context, _, _ string) error { <-ctx.Done(); return ctx.Err() }

// A store that stops answering before the handler (the seen or claim call) fails the
// delivery within the store timeout, with a StoreError matching
// context.DeadlineExceeded, though the handler's context has no deadline: a silent
// database is found within the bound instead of holding the worker (issue 38). The
// handler does not run.
func TestSilentStoreFailsWithinStoreTimeout(t *testing.T) {
	for _, mode := range []idempotency.Mode{idempotency.ModeClaim, idempotency.ModeSeenSet} {
		ran := false
		h, err := idempotency.Wrap(silentStore{}, func(context.Context, *babelqueue.Message) error { ran = true; return nil },
			idempotency.WithMode(mode), idempotency.WithStoreTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		m := &babelqueue.Message{Envelope: &envelope.Envelope{Meta: envelope.Meta{ID: "id-1"}}}
		done := make(chan error, 1)
		go func() { done <- h(context.Background(), m) }()
		select {
		case err := <-done:
			var se *idempotency.StoreError
			if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("mode %v: %v, want a StoreError matching context.DeadlineExceeded", mode, err)
			}
		case <-time.After(5 * time.Second): // a hang guard: the bound is 100 ms
			t.Fatalf("mode %v: the handler wrapper still waits on a silent store 5 s on, past its 100 ms store timeout", mode)
		}
		if ran {
			t.Errorf("mode %v: the handler ran without its id checked", mode)
		}
	}
}
