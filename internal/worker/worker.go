// Package worker is the runtime's consumer: the pool of workers behind App.Run, and the
// path of one delivery through a worker, in the order it happens (delivery.go):
//
//  1. receive it (a receive that fails is logged, reported and retried with a backoff);
//  2. read it: the schema-version gate, the envelope, the reconciled attempts;
//  3. tell the receive hooks;
//  4. find its URN's handler and run it (a panic or a timeout is a failure), tell the
//     handle hooks, read the handler's answer (a failure, NoRetry, Requeue);
//  5. take its route from settle.Decide and carry it out (settle.go): build the
//     settlement, hand it to the consumer, follow the route's next step when a write
//     cannot be built or is too large, rewind when the broker did not confirm;
//  6. tell the settle hooks and log the outcome.
//
// Every rule of what becomes of a delivery is in settle.Decide; this package carries
// its route out. The user's types (the message, the handler, the handler's answers, the
// hooks' events) stay in the root package, which lends them to the worker through
// [App] and [Hooks].
package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Config is what the workers read of the app's options.
type Config struct {
	// Queue is the queue consumed.
	Queue string
	// Concurrency is the number of workers; Prefetch the deliveries the consumer may
	// hold (raised to Concurrency).
	Concurrency int
	Prefetch    int
	// HandlerTimeout bounds a handler call (0: no bound); ShutdownGrace is how long
	// in-flight handlers may finish once Run's context ends; SettleTimeout bounds a
	// settlement.
	HandlerTimeout time.Duration
	ShutdownGrace  time.Duration
	SettleTimeout  time.Duration
	// Now is the clock of dead_letter.failed_at.
	Now func() time.Time
	// Policy and Caps are what settle.Decide reads.
	Policy settle.Policy
	Caps   transport.Capabilities
	// DeadLetterQueue is the queue's dead-letter queue; DeadLetterOverride and
	// DeadLetterSuffix name that of another queue (settle.DeadLetterQueue).
	DeadLetterQueue    string
	DeadLetterOverride string
	DeadLetterSuffix   string
	// Log is the app's logger.
	Log *slog.Logger
}

// Handler is a handler as the worker calls it: the root package's Handler, M its
// message type.
type Handler[M any] func(ctx context.Context, m *M) error

// App is what the workers need of the app they work for, in the user's types: M is
// the message a handler is given.
type App[M any] interface {
	// FillMessage makes m the message a handler is given for a delivery whose envelope
	// decoded, with its reconciled attempts.
	FillMessage(m *M, env *envelope.Envelope, attempts int, d *transport.Delivery)
	// Handler returns the handler of urn, its middleware around it.
	Handler(urn string) (Handler[M], bool)
	// AnswerReader returns a function that reads a handler's error: a failure, a
	// failure not to retry (the error to record), or a requeue after a delay. Each
	// worker asks for its own and calls it from one goroutine.
	AnswerReader() func(err error) (kind settle.Kind, after time.Duration, cause error)
	// UnknownURN is the failure of a valid envelope whose URN has no handler.
	UnknownURN(urn string) error
	// Panicked is the failure of a handler that panicked with v.
	Panicked(v any, stack []byte) error
	// TimedOut is the failure of a handler that ran past the timeout.
	TimedOut(timeout time.Duration) error
}

// Delivery is what a worker learned of one delivery, as the hooks are told it.
type Delivery struct {
	// D is the delivery as the consumer gave it.
	D *transport.Delivery
	// Env is its envelope; nil for poison and schema-version rejections.
	Env *envelope.Envelope
	// Facts are what settle.Decide is told of it.
	Facts settle.Facts
	// Cause is why it failed, was poison or was rejected.
	Cause error
	// Route is its URN, or the reserved route of a schema-version rejection.
	Route string
}

// Settled is a settlement as the settle hooks are told it.
type Settled struct {
	Delivery Delivery
	// Decision is the step of the route that was carried out.
	Decision settle.Decision
	// Writes are the settlement's writes.
	Writes []*transport.Message
	// Err is nil when the broker confirmed the settlement.
	Err error
	// Took is how long the settlement took.
	Took time.Duration
}

// Hooks are the app's observers as the workers tell them; the root package turns each
// call into its public event. Observing says which are called at all. The context of
// Received, Handled and Settled carries the delivery's message (MessageKey) when its
// envelope decoded.
type Hooks interface {
	Received(ctx context.Context, d Delivery)
	Handled(ctx context.Context, d Delivery, start time.Time, took time.Duration, err error)
	Settled(ctx context.Context, s Settled)
	ReceiveFailed(ctx context.Context, queue string, err error, backoff time.Duration)
	SettleFailed(ctx context.Context, d Delivery, writes []*transport.Message, err error)
}

// Observing says which hooks have observers: a hook nobody observes costs the hot
// path one branch.
type Observing struct {
	Receive, Handle, Settle, ReceiveError, SettleFailed bool
}

// any reports whether a hook that is told of a delivery with its message is observed.
func (o Observing) any() bool { return o.Receive || o.Handle || o.Settle }

// Pool is an app's workers. Run consumes with them; Status is safe for concurrent use.
type Pool[M any] struct {
	cfg    Config
	app    App[M]
	hooks  Hooks
	obs    Observing
	status Status
}

// New returns the pool of an app.
func New[M any](cfg Config, app App[M], hooks Hooks, obs Observing) *Pool[M] {
	return &Pool[M]{cfg: cfg, app: app, hooks: hooks, obs: obs}
}

// Status is what a pool reports for readiness probes.
func (p *Pool[M]) Status() *Status { return &p.status }

// Status is what Run is doing, for readiness probes. Safe for concurrent use.
type Status struct {
	consuming    atomic.Bool
	lastRecvErr  atomic.Pointer[receiveFailure]
	lastReceived atomic.Int64 // Unix ns of the last delivery received
}

type receiveFailure struct {
	err error
	at  time.Time
}

// Consuming reports that Run holds an open consumer and its last receive did not fail.
func (s *Status) Consuming() bool { return s.consuming.Load() }

// LastReceived is when the last delivery was received; zero when none was.
func (s *Status) LastReceived() time.Time {
	if ns := s.lastReceived.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// LastReceiveError is when the last receive failed since the consumer opened, and
// with what error; nil when none did.
func (s *Status) LastReceiveError() (at time.Time, err error) {
	if f := s.lastRecvErr.Load(); f != nil {
		return f.at, f.err
	}
	return time.Time{}, nil
}
