// Package idempotencytest is the behavioural kit every idempotency store runs: the
// semantics of SPEC §8.1 as one table, driven through the middleware against the
// store (Run); the claim contract of a [idempotency.ClaimStore]; eight workers racing
// over side-by-side duplicates (RunConcurrency); a worker process killed mid-handler
// or between its handler and its acknowledgement ([Crash]); and the cost per message
// beside a run without the middleware (Bench). The in-memory store runs it in package
// idempotency; the Redis and PostgreSQL stores run it against the real servers.
package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/idempotency"
)

// Config describes the store under test.
type Config struct {
	// NewStore returns a store whose remembered ids lapse after ttl (zero: never). It
	// is called for every case and must close what it opens with t.Cleanup.
	NewStore func(t testing.TB, ttl time.Duration) idempotency.Store
	// Granularity is the step of the store's clock for leases and TTLs: they are
	// rounded up to it, and lapse up to one step late (the PHP layout of pgstore
	// counts whole seconds). Zero is one millisecond.
	Granularity time.Duration
}

func (c Config) step() time.Duration {
	if c.Granularity <= 0 {
		return time.Millisecond
	}
	return c.Granularity
}

// lapse is how long to wait for a lease or TTL of d to have lapsed in the store.
func (c Config) lapse(d time.Duration) time.Duration {
	g := c.step()
	return (d+g-1)/g*g + g + 50*time.Millisecond
}

// NewID returns a message id no other test uses: cases share one real store.
func NewID() string { return "idemp-test-" + envelope.NewUUID() }

// Message returns a message as the runtime hands it to a handler, with meta.id id
// ("" for an envelope without one).
func Message(t testing.TB, id string) *babelqueue.Message {
	t.Helper()
	env, err := envelope.Make("urn:babel:idempotency:test", map[string]any{"n": 1}, envelope.WithQueue("idempotency"))
	if err != nil {
		t.Fatal(err)
	}
	env.Meta.ID = id
	return &babelqueue.Message{Envelope: env, Queue: "idempotency"}
}

// Run runs the semantics table in both modes and, for a ClaimStore, the claim
// contract, against the store cfg opens.
func Run(t *testing.T, cfg Config) {
	t.Run("Semantics", func(t *testing.T) { runSemantics(t, cfg) })
	t.Run("Claims", func(t *testing.T) { runClaims(t, cfg) })
	t.Run("IDs", func(t *testing.T) { runIDs(t, cfg) })
}

// outcome is what one delivery through the wrapped handler came to.
type outcome int

const (
	ran         outcome = iota + 1 // the handler ran; its own error (if any) came back unchanged
	skipped                        // not run, nil: the runtime acknowledges it
	requeued                       // not run, babelqueue.Requeue with cause ErrHeld
	storeFailed                    // a *StoreError came back (ranToo says whether the handler ran)
)

func (o outcome) String() string {
	return [...]string{"?", "ran", "skipped", "requeued", "store error"}[o]
}

// step is one thing a case does.
type step struct {
	// A delivery (the zero action): the handler fails with fail, panics with panics,
	// and the envelope has no meta.id with noID.
	fail   error
	panics bool
	noID   bool
	want   outcome
	ranToo bool // with want storeFailed: the handler ran before the store failed

	forget bool          // instead of a delivery: Forget the id
	heal   bool          // instead of a delivery: stop the injected store failure
	sleep  time.Duration // instead of a delivery: wait (a lease or TTL lapses); scaled by lapse()

	remembered bool // Seen(id) after the step
}

// row is one case of the semantics table.
type row struct {
	name  string
	modes []idempotency.Mode // the modes it runs in; nil: both
	ttl   time.Duration      // TTL of remembered ids
	opts  []idempotency.Option
	// before leaves the state another worker left (a claim, a remembered id).
	before func(ctx context.Context, t *testing.T, s idempotency.Store, id string)
	fault  string // store calls that fail from the start: "before" (seen, claim), "remember", "all"
	steps  []step
}

var errHandler = errors.New("handler failed on purpose")

var (
	bothModes   = []idempotency.Mode{idempotency.ModeClaim, idempotency.ModeSeenSet}
	claimOnly   = []idempotency.Mode{idempotency.ModeClaim}
	seenSetOnly = []idempotency.Mode{idempotency.ModeSeenSet}
)

func claimFor(lease time.Duration) func(context.Context, *testing.T, idempotency.Store, string) {
	return func(ctx context.Context, t *testing.T, s idempotency.Store, id string) {
		t.Helper()
		cs, ok := s.(idempotency.ClaimStore)
		if !ok {
			t.Skipf("another worker's claim: %T cannot claim", s)
		}
		c, err := cs.Claim(ctx, id, lease)
		if err != nil || c.Status != idempotency.Claimed {
			t.Fatalf("another worker's Claim = %+v, %v; want claimed", c, err)
		}
	}
}

func rememberFirst(ctx context.Context, t *testing.T, s idempotency.Store, id string) {
	t.Helper()
	if err := s.Remember(ctx, id); err != nil {
		t.Fatal(err)
	}
}

var semantics = []row{
	{name: "first delivery runs and is remembered", steps: []step{
		{want: ran, remembered: true},
	}},
	{name: "redelivery after success is acknowledged without running", steps: []step{
		{want: ran, remembered: true},
		{want: skipped, remembered: true},
		{want: skipped, remembered: true},
	}},
	{name: "id remembered by another worker is acknowledged without running", before: rememberFirst, steps: []step{
		{want: skipped, remembered: true},
	}},
	{name: "handler error leaves the id free", steps: []step{
		{fail: errHandler, want: ran, remembered: false},
		{fail: errHandler, want: ran, remembered: false},
		{want: ran, remembered: true},
	}},
	{name: "NoRetry leaves the id free", steps: []step{
		{fail: babelqueue.NoRetry(errHandler), want: ran, remembered: false},
		{want: ran, remembered: true},
	}},
	{name: "handler's own Requeue leaves the id free", steps: []step{
		{fail: babelqueue.Requeue(time.Second, errHandler), want: ran, remembered: false},
		{want: ran, remembered: true},
	}},
	{name: "panic leaves the id free", steps: []step{
		{panics: true, want: ran, remembered: false},
		{want: ran, remembered: true},
	}},
	{name: "no meta.id runs every time without the store", fault: "all", steps: []step{
		{noID: true, want: ran},
		{noID: true, want: ran},
		{noID: true, fail: errHandler, want: ran},
	}},
	{name: "Forget lets the next delivery run", steps: []step{
		{want: ran, remembered: true},
		{forget: true, remembered: false},
		{want: ran, remembered: true},
		{want: skipped, remembered: true},
	}},
	{name: "store error before the handler fails the delivery without running", fault: "before", steps: []step{
		{want: storeFailed, remembered: false},
		{heal: true},
		{want: ran, remembered: true},
	}},
	{name: "store error on remember fails the delivery", modes: seenSetOnly, fault: "remember", steps: []step{
		{want: storeFailed, ranToo: true, remembered: false},
		{heal: true},
		{want: ran, remembered: true},
	}},
	{name: "store error on remember keeps the claim until its lease lapses", modes: claimOnly, fault: "remember",
		opts: []idempotency.Option{idempotency.WithLease(300 * time.Millisecond)}, steps: []step{
			{want: storeFailed, ranToo: true, remembered: false},
			{heal: true},
			{want: requeued, remembered: false},
			{sleep: 300 * time.Millisecond},
			{want: ran, remembered: true},
		}},
	{name: "id claimed by another worker is requeued, not run", modes: claimOnly, before: claimFor(time.Minute), steps: []step{
		{want: requeued, remembered: false},
		{want: requeued, remembered: false},
	}},
	{name: "claim left by a dead worker is taken over once its lease lapses", modes: claimOnly,
		before: claimFor(300 * time.Millisecond), steps: []step{
			{want: requeued, remembered: false},
			{sleep: 300 * time.Millisecond},
			{want: ran, remembered: true},
			{want: skipped, remembered: true},
		}},
	{name: "a failure releases the claim at once", modes: claimOnly, opts: []idempotency.Option{idempotency.WithLease(time.Hour)}, steps: []step{
		{fail: errHandler, want: ran, remembered: false},
		{panics: true, want: ran, remembered: false},
		{want: ran, remembered: true},
	}},
	{name: "Forget drops another worker's claim", modes: claimOnly, before: claimFor(time.Hour), steps: []step{
		{want: requeued},
		{forget: true},
		{want: ran, remembered: true},
	}},
	{name: "seen-set mode does not look at claims", modes: seenSetOnly, before: claimFor(time.Hour), steps: []step{
		{want: ran, remembered: true},
		{want: skipped, remembered: true},
	}},
	{name: "remembered id lapses after the TTL", ttl: 300 * time.Millisecond, steps: []step{
		{want: ran, remembered: true},
		{want: skipped, remembered: true},
		{sleep: 300 * time.Millisecond, remembered: false},
		{want: ran, remembered: true},
	}},
}

func runSemantics(t *testing.T, cfg Config) {
	for _, mode := range bothModes {
		t.Run(mode.String(), func(t *testing.T) {
			for _, r := range semantics {
				if r.modes != nil && !contains(r.modes, mode) {
					continue
				}
				t.Run(r.name, func(t *testing.T) {
					t.Parallel()
					runRow(t, cfg, mode, r)
				})
			}
		})
	}
}

func contains(ms []idempotency.Mode, m idempotency.Mode) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func runRow(t *testing.T, cfg Config, mode idempotency.Mode, r row) {
	ctx := context.Background()
	base := cfg.NewStore(t, r.ttl)
	if _, ok := base.(idempotency.ClaimStore); !ok && mode == idempotency.ModeClaim {
		t.Skipf("%T is not a ClaimStore", base)
	}
	store, faults := withFaults(base)
	faults.set(r.fault)
	id := NewID()
	if r.before != nil {
		r.before(ctx, t, base, id)
	}
	const heldRetry = 250 * time.Millisecond
	opts := append([]idempotency.Option{idempotency.WithMode(mode), idempotency.WithLease(time.Minute),
		idempotency.WithHeldRetry(heldRetry)}, r.opts...)
	var calls atomic.Int32
	var current step
	h, err := idempotency.Wrap(store, func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		if current.panics {
			panic("handler panicked on purpose")
		}
		return current.fail
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range r.steps {
		current = s
		switch {
		case s.forget:
			if err := base.Forget(ctx, id); err != nil {
				t.Fatalf("step %d: Forget: %v", i, err)
			}
		case s.heal:
			faults.set("")
		case s.sleep > 0:
			time.Sleep(cfg.lapse(s.sleep))
		default:
			msgID := id
			if s.noID {
				msgID = ""
			}
			before := calls.Load()
			err := deliver(ctx, h, Message(t, msgID))
			checkOutcome(t, i, s, calls.Load()-before, err, heldRetry)
		}
		if s.noID || s.heal {
			continue
		}
		seen, err := base.Seen(ctx, id)
		if err != nil {
			t.Fatalf("step %d: Seen: %v", i, err)
		}
		if seen != s.remembered {
			t.Fatalf("step %d: Seen(id) = %v after the step, want %v", i, seen, s.remembered)
		}
	}
}

// deliver calls h as the runtime does, turning a panic into an error.
func deliver(ctx context.Context, h babelqueue.Handler, m *babelqueue.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &babelqueue.PanicError{Value: r}
		}
	}()
	return h(ctx, m)
}

func checkOutcome(t *testing.T, i int, s step, calls int32, err error, heldRetry time.Duration) {
	t.Helper()
	var se *idempotency.StoreError
	var rq *babelqueue.RequeueError
	switch s.want {
	case ran:
		if calls != 1 {
			t.Fatalf("step %d: handler ran %d times, want once (err %v)", i, calls, err)
		}
		switch {
		case s.panics:
			var pe *babelqueue.PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("step %d: err = %v, want the handler's panic", i, err)
			}
		case s.fail == nil && err != nil:
			t.Fatalf("step %d: err = %v, want nil", i, err)
		case s.fail != nil && err != s.fail: // the handler's error unchanged, so NoRetry and Requeue still work
			t.Fatalf("step %d: err = %v, want the handler's own error %v", i, err, s.fail)
		}
	case skipped:
		if calls != 0 || err != nil {
			t.Fatalf("step %d: handler ran %d times, err %v; want skipped (not run, nil)", i, calls, err)
		}
	case requeued:
		if calls != 0 {
			t.Fatalf("step %d: handler ran %d times; want requeued without running", i, calls)
		}
		if !errors.As(err, &rq) || !errors.Is(err, idempotency.ErrHeld) {
			t.Fatalf("step %d: err = %v; want babelqueue.Requeue with cause ErrHeld", i, err)
		}
		if rq.After != heldRetry {
			t.Fatalf("step %d: requeued for %s, want the held retry %s", i, rq.After, heldRetry)
		}
	case storeFailed:
		if !errors.As(err, &se) || !errors.Is(err, errInjected) {
			t.Fatalf("step %d: err = %v; want a *StoreError wrapping the store's error", i, err)
		}
		if want := map[bool]int32{false: 0, true: 1}[s.ranToo]; calls != want {
			t.Fatalf("step %d: handler ran %d times, want %d", i, calls, want)
		}
	}
}

// errInjected is the failure of an injected store fault.
var errInjected = errors.New("injected store failure")

// faults makes chosen calls of a store fail.
type faults struct {
	mu   sync.Mutex
	mode string
}

func (f *faults) set(mode string) {
	f.mu.Lock()
	f.mode = mode
	f.mu.Unlock()
}

func (f *faults) check(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.mode == "all",
		f.mode == "before" && (op == "seen" || op == "claim"),
		f.mode == op:
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	return nil
}

type faultyStore struct {
	s idempotency.Store
	f *faults
}

func (s faultyStore) Seen(ctx context.Context, id string) (bool, error) {
	if err := s.f.check("seen"); err != nil {
		return false, err
	}
	return s.s.Seen(ctx, id)
}

func (s faultyStore) Remember(ctx context.Context, id string) error {
	if err := s.f.check("remember"); err != nil {
		return err
	}
	return s.s.Remember(ctx, id)
}

func (s faultyStore) Forget(ctx context.Context, id string) error {
	if err := s.f.check("forget"); err != nil {
		return err
	}
	return s.s.Forget(ctx, id)
}

type faultyClaimStore struct {
	faultyStore
	cs idempotency.ClaimStore
}

func (s faultyClaimStore) Claim(ctx context.Context, id string, lease time.Duration) (idempotency.Claim, error) {
	if err := s.f.check("claim"); err != nil {
		return idempotency.Claim{}, err
	}
	return s.cs.Claim(ctx, id, lease)
}

func (s faultyClaimStore) Release(ctx context.Context, id, token string) error {
	if err := s.f.check("release"); err != nil {
		return err
	}
	return s.cs.Release(ctx, id, token)
}

// withFaults wraps s so that the calls faults names fail; it stays a ClaimStore when s
// is one.
func withFaults(s idempotency.Store) (idempotency.Store, *faults) {
	f := &faults{}
	fs := faultyStore{s: s, f: f}
	if cs, ok := s.(idempotency.ClaimStore); ok {
		return faultyClaimStore{faultyStore: fs, cs: cs}, f
	}
	return fs, f
}

// runClaims checks the claim contract of a ClaimStore directly.
func runClaims(t *testing.T, cfg Config) {
	ctx := context.Background()
	s, ok := cfg.NewStore(t, 0).(idempotency.ClaimStore)
	if !ok {
		t.Skip("not a ClaimStore")
	}
	claim := func(t *testing.T, id string, lease time.Duration, want idempotency.Status) idempotency.Claim {
		t.Helper()
		c, err := s.Claim(ctx, id, lease)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if c.Status != want {
			t.Fatalf("Claim = %+v, want %s", c, want)
		}
		if (c.Token != "") != (want == idempotency.Claimed) {
			t.Fatalf("Claim = %+v: a token comes with, and only with, a claim", c)
		}
		return c
	}
	seen := func(t *testing.T, id string, want bool) {
		t.Helper()
		got, err := s.Seen(ctx, id)
		if err != nil || got != want {
			t.Fatalf("Seen = %v, %v; want %v", got, err, want)
		}
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a held claim reports what is left of its lease", func(t *testing.T) {
		t.Parallel()
		id := NewID()
		claim(t, id, time.Minute, idempotency.Claimed)
		c := claim(t, id, time.Minute, idempotency.Held)
		if c.Remaining <= 0 || c.Remaining > time.Minute+cfg.step() {
			t.Fatalf("Remaining = %s, want in (0, 1m]", c.Remaining)
		}
		seen(t, id, false) // a claim is not a remembered id
	})
	t.Run("release with another token leaves the claim", func(t *testing.T) {
		t.Parallel()
		id := NewID()
		c := claim(t, id, time.Minute, idempotency.Claimed)
		must(t, s.Release(ctx, id, c.Token+"x"))
		must(t, s.Release(ctx, id, "1"))
		claim(t, id, time.Minute, idempotency.Held)
		must(t, s.Release(ctx, id, c.Token))
		claim(t, id, time.Minute, idempotency.Claimed)
	})
	t.Run("remember replaces the claim and outlives a late release", func(t *testing.T) {
		t.Parallel()
		id := NewID()
		c := claim(t, id, time.Minute, idempotency.Claimed)
		must(t, s.Remember(ctx, id))
		seen(t, id, true)
		must(t, s.Release(ctx, id, c.Token))
		seen(t, id, true)
		claim(t, id, time.Minute, idempotency.Remembered)
	})
	t.Run("a lapsed claim is taken over and the old token releases nothing", func(t *testing.T) {
		t.Parallel()
		id := NewID()
		old := claim(t, id, 200*time.Millisecond, idempotency.Claimed)
		time.Sleep(cfg.lapse(200 * time.Millisecond))
		claim(t, id, time.Minute, idempotency.Claimed)
		must(t, s.Release(ctx, id, old.Token))
		claim(t, id, time.Minute, idempotency.Held)
	})
	t.Run("forget drops a claim and a remembered id; an unknown id is no error", func(t *testing.T) {
		t.Parallel()
		id := NewID()
		claim(t, id, time.Minute, idempotency.Claimed)
		must(t, s.Forget(ctx, id))
		claim(t, id, time.Minute, idempotency.Claimed)
		must(t, s.Remember(ctx, id))
		must(t, s.Forget(ctx, id))
		seen(t, id, false)
		must(t, s.Forget(ctx, NewID()))
		must(t, s.Release(ctx, NewID(), "no-such-token"))
	})
	t.Run("remember without a claim", func(t *testing.T) {
		t.Parallel()
		id := NewID()
		seen(t, id, false)
		must(t, s.Remember(ctx, id))
		must(t, s.Remember(ctx, id))
		seen(t, id, true)
		claim(t, id, time.Minute, idempotency.Remembered)
	})
}

// runIDs checks that ids are kept apart byte for byte, whatever they hold.
func runIDs(t *testing.T, cfg Config) {
	ctx := context.Background()
	s := cfg.NewStore(t, 0)
	base := NewID()
	ids := []string{
		base + "-ascii",
		base + "-Ünïcødé-注文-🧾-end",
		base + " with spaces and\ttab",
		base + `-quotes'"\-and-x'); DROP TABLE t; --`,
		base + ":colon:%s%d*?[]",
		base + "-" + strings.Repeat("x", 200-len(base)-1),
	}
	for _, id := range ids {
		if err := s.Remember(ctx, id); err != nil {
			t.Fatalf("Remember(%q): %v", id, err)
		}
	}
	for _, id := range ids {
		if ok, err := s.Seen(ctx, id); err != nil || !ok {
			t.Fatalf("Seen(%q) = %v, %v; want true", id, ok, err)
		}
		for _, other := range []string{strings.ToUpper(id), id + " ", id[:len(id)-1]} {
			if ok, err := s.Seen(ctx, other); err != nil || ok {
				t.Fatalf("Seen(%q) = %v, %v after Remember(%q); want false", other, ok, err, id)
			}
		}
	}
}

// WantClaim claims id for a minute on s and fails the test unless the store answers
// want; it returns the claim.
func WantClaim(t testing.TB, s idempotency.ClaimStore, id string, want idempotency.Status) idempotency.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), id, time.Minute)
	if err != nil || c.Status != want {
		t.Fatalf("Claim = %+v, %v; want %s", c, err, want)
	}
	return c
}

// WantSeen fails the test unless s.Seen(id) is want.
func WantSeen(t testing.TB, s idempotency.Store, id string, want bool) {
	t.Helper()
	if got, err := s.Seen(context.Background(), id); err != nil || got != want {
		t.Fatalf("Seen = %v, %v; want %v", got, err, want)
	}
}
