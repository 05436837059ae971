package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/babelqueue-go/babelqueue"
)

// Mode is how the middleware keeps a message id to one effect; see the package
// documentation.
type Mode int

const (
	// ModeAuto (the default) is [ModeClaim] when the store is a [ClaimStore], else
	// [ModeSeenSet].
	ModeAuto Mode = iota
	// ModeClaim claims the id with a lease before the handler runs; a delivery whose
	// id another worker holds is requeued. The store must be a [ClaimStore].
	ModeClaim
	// ModeSeenSet checks the id before the handler runs and remembers it after, the
	// family's base contract: concurrent duplicates may both run.
	ModeSeenSet
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeClaim:
		return "claim"
	case ModeSeenSet:
		return "seen-set"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// Defaults of the options.
const (
	// DefaultLease is how long a claim holds before it lapses ([WithLease]).
	DefaultLease = 5 * time.Minute
	// DefaultHeldRetry is how long a held delivery waits before it comes again
	// ([WithHeldRetry]).
	DefaultHeldRetry = time.Second
	// DefaultStoreTimeout bounds every store call: the seen or claim before the
	// handler and the remember or release after it ([WithStoreTimeout]), so a store
	// whose connection went silent is found within it (issue 38).
	DefaultStoreTimeout = 10 * time.Second
)

// Option configures [Middleware] and [Wrap].
type Option func(*config)

type config struct {
	mode         Mode
	lease        time.Duration
	heldRetry    time.Duration
	storeTimeout time.Duration
	log          *slog.Logger
	errs         []error
}

func (c *config) invalid(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: idempotency: "+format, append([]any{babelqueue.ErrInvalidOption}, args...)...))
}

// WithMode chooses the mode (default [ModeAuto]: claim mode when the store can claim).
func WithMode(m Mode) Option {
	return func(c *config) {
		if m < ModeAuto || m > ModeSeenSet {
			c.invalid("mode %d", int(m))
			return
		}
		c.mode = m
	}
}

// WithLease sets how long a claim holds before it lapses in claim mode (default
// [DefaultLease], 5 minutes). It bounds how long the message of a worker that died
// mid-handler waits before another worker runs it; keep it above the longest run of
// the handler, or a handler still running when its lease lapses may be run a second
// time beside it. The PHP SDK's default is one hour.
func WithLease(d time.Duration) Option {
	return positive("lease", d, func(c *config) { c.lease = d })
}

// WithHeldRetry sets how long a delivery whose id another worker holds waits before it
// comes again (default [DefaultHeldRetry], 1 second): it polls the claim at this pace
// until the holder remembers the id (the delivery is then acknowledged) or the lease
// lapses (it then runs). The wait is one fixed value, not what is left of the lease,
// because RabbitMQ keeps one queue per distinct delay. On brokers without delays the
// delivery comes again at once, behind the messages already waiting.
func WithHeldRetry(d time.Duration) Option {
	return positive("held retry", d, func(c *config) { c.heldRetry = d })
}

// WithStoreTimeout bounds each store call (default [DefaultStoreTimeout], 10 seconds).
// The call before the handler (seen, or claim) runs within the handler's context and
// this bound: a store that does not answer (a database whose connection went silent)
// fails the delivery with a [StoreError] matching context.DeadlineExceeded, which is
// retried like any failed delivery, instead of holding the worker until the
// connection's own timeouts, if any. The call after the handler (remember, or release)
// runs even when the handler's context has ended, within this bound.
func WithStoreTimeout(d time.Duration) Option {
	return positive("store timeout", d, func(c *config) { c.storeTimeout = d })
}

// positive is an option setting a duration that must be more than zero.
func positive(what string, d time.Duration, set func(*config)) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("%s %s (want more than zero)", what, d)
			return
		}
		set(c)
	}
}

// WithLogger sets the logger (default slog.Default()). The middleware logs a release
// that failed (Warn) and, at Debug, each skipped or requeued delivery.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.invalid("logger is nil")
			return
		}
		c.log = l
	}
}

// guard is a configured middleware.
type guard struct {
	store  Store
	claims ClaimStore // nil in seen-set mode
	config
}

func newGuard(store Store, opts []Option) (*guard, error) {
	cfg := config{lease: DefaultLease, heldRetry: DefaultHeldRetry, storeTimeout: DefaultStoreTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if store == nil {
		cfg.invalid("store is nil")
	}
	claims, canClaim := store.(ClaimStore)
	switch cfg.mode {
	case ModeClaim:
		if store != nil && !canClaim {
			cfg.invalid("claim mode needs a ClaimStore; %T is not one", store)
		}
	case ModeSeenSet:
		claims = nil
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	return &guard{store: store, claims: claims, config: cfg}, nil
}

// Middleware returns middleware that keeps every handler it wraps to one effect per
// meta.id, with the semantics of the package documentation: app-wide with
// [babelqueue.App.Use], or for some handlers at [babelqueue.App.Handle]. An invalid
// option, or a nil store, is an error matching [babelqueue.ErrInvalidOption].
func Middleware(store Store, opts ...Option) (babelqueue.Middleware, error) {
	g, err := newGuard(store, opts)
	if err != nil {
		return nil, err
	}
	return g.wrap, nil
}

// Wrap returns h kept to one effect per meta.id, as [Middleware] does for every
// handler.
func Wrap(store Store, h babelqueue.Handler, opts ...Option) (babelqueue.Handler, error) {
	g, err := newGuard(store, opts)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: idempotency: handler is nil", babelqueue.ErrInvalidOption)
	}
	return g.wrap(h), nil
}

func (g *guard) wrap(next babelqueue.Handler) babelqueue.Handler {
	return func(ctx context.Context, m *babelqueue.Message) error {
		if m == nil || m.Envelope == nil || m.Envelope.Meta.ID == "" {
			return next(ctx, m) // no id: nothing to dedupe on (fail open)
		}
		if g.claims != nil {
			return g.claimed(ctx, m, next)
		}
		return g.seenSet(ctx, m, next)
	}
}

func (g *guard) seenSet(ctx context.Context, m *babelqueue.Message, next babelqueue.Handler) error {
	id := m.Envelope.Meta.ID
	sctx, cancel := g.beforeCtx(ctx)
	seen, err := g.store.Seen(sctx, id)
	cancel()
	if err != nil {
		return &StoreError{Op: "seen", ID: id, Err: err}
	}
	if seen {
		g.log.Debug("idempotency: remembered id; acknowledged without running", "id", id, "urn", m.URN())
		return nil
	}
	if err := next(ctx, m); err != nil {
		return err
	}
	return g.remember(ctx, id)
}

func (g *guard) claimed(ctx context.Context, m *babelqueue.Message, next babelqueue.Handler) error {
	id := m.Envelope.Meta.ID
	cctx, cancel := g.beforeCtx(ctx)
	c, err := g.claims.Claim(cctx, id, g.lease)
	cancel()
	if err != nil {
		return &StoreError{Op: "claim", ID: id, Err: err}
	}
	switch c.Status {
	case Claimed:
	case Remembered:
		g.log.Debug("idempotency: remembered id; acknowledged without running", "id", id, "urn", m.URN())
		return nil
	case Held:
		g.log.Debug("idempotency: id claimed by another worker; requeued",
			"id", id, "urn", m.URN(), "after", g.heldRetry, "lease_left", c.Remaining)
		return babelqueue.Requeue(g.heldRetry, fmt.Errorf("%w: %q", ErrHeld, id))
	default:
		return &StoreError{Op: "claim", ID: id, Err: fmt.Errorf("the store answered with %s", c.Status)}
	}
	done := false
	defer func() {
		if !done { // the handler failed or panicked: free the id for the redelivery
			g.release(ctx, id, c.Token)
		}
	}()
	if err := next(ctx, m); err != nil {
		return err
	}
	done = true // from here the claim stays until remembered or lapsed
	return g.remember(ctx, id)
}

// beforeCtx is the context of the store call made before the handler: the handler's,
// bounded by the store timeout.
func (g *guard) beforeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.storeTimeout)
}

// afterCtx is the context of a store call made after the handler: the handler's may
// have ended (a handler timeout) while the call must still be made.
func (g *guard) afterCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), g.storeTimeout)
}

func (g *guard) remember(ctx context.Context, id string) error {
	rctx, cancel := g.afterCtx(ctx)
	defer cancel()
	if err := g.store.Remember(rctx, id); err != nil {
		return &StoreError{Op: "remember", ID: id, Err: err}
	}
	return nil
}

func (g *guard) release(ctx context.Context, id, token string) {
	rctx, cancel := g.afterCtx(ctx)
	defer cancel()
	if err := g.claims.Release(rctx, id, token); err != nil {
		g.log.Warn("idempotency: releasing the claim of a failed handler failed; the id is free again when the lease lapses",
			"id", id, "lease", g.lease, "error", err)
	}
}
