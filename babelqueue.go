// Package babelqueue is the Go runtime of the BabelQueue polyglot queue standard: one
// strict JSON envelope, routed by URN, so a job produced by a PHP, Python, Java, .NET or
// Node service is consumed natively in Go, and back, over the broker a team already runs.
//
// An [App] is opened on a broker URL ([Open]) or around a transport ([New]). Handlers
// are registered per URN ([App.Handle], [Handle]); [App.Publish] sends an envelope;
// [App.Run] consumes with a pool of workers until its context ends and settles every
// delivery by the rules in docs/settlement.md: retries with attempts+1, dead-lettering
// with a dead_letter block, the poison route for bodies that are not envelopes, the
// schema-version gate. Every write made to settle a delivery is confirmed by the broker
// before the delivery is acknowledged; when one fails the delivery is given back to the
// broker, so nothing is lost.
//
// # Layers
//
// Helpers (idempotency, payload schemas, tracing, metrics) are layers around the
// runtime, in the style of net/http:
//
//   - [Middleware] wraps handlers: app-wide with [App.Use], per handler at [App.Handle].
//   - [PublishMiddleware] wraps publishing ([App.UsePublish]): it sees the envelope
//     before it is encoded and may change its data or add out-of-band headers.
//   - An [Observer] ([WithObserver]) is told what happens: a delivery received, a handler
//     finished, a settlement decided and done, a publish, a receive error.
//
// A handler decides more than success or failure with [NoRetry] (dead-letter at once)
// and [Requeue] (come again later, not counted as an attempt).
//
// The transport is chosen by the URL scheme. Each broker is a module of its own; import
// the ones you use:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/redis"
//
// memory:// is built in.
package babelqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/internal/worker"
	"github.com/babelqueue-go/babelqueue/transport"
	_ "github.com/babelqueue-go/babelqueue/transport/memory" // memory:// is built in
)

// Version is the version of this SDK.
const Version = "0.2.0"

// App is a BabelQueue runtime bound to one transport. Its methods are safe for
// concurrent use.
type App struct {
	cfg   config
	tr    transport.Transport
	owned bool // opened by URL: Close closes it
	caps  transport.Capabilities
	log   *slog.Logger
	dlq   string
	pol   settle.Policy
	hooks hooks

	mu       sync.RWMutex
	handlers map[string]*route
	appMW    []Middleware
	pubMW    []PublishMiddleware
	publish  PublishFunc // pubMW around send, rebuilt by UsePublish
	running  bool
	closed   bool

	workers *worker.Pool[Message] // Run's
}

// route is one registered handler: the user's handler, its own middleware, and the
// chain with the app's middleware around it.
type route struct {
	h     Handler
	mw    []Middleware
	chain Handler
}

// Open opens an App on the broker at url, choosing the transport by the URL's scheme
// (memory://, redis://, amqp://, kafka://, sqs://, sb://, pulsar://, artemis://). An
// unknown scheme is an error that names the known schemes and the module providing
// each. Credentials in url never appear in errors or logs. The transport logs through
// the App's logger, and [App.Close] closes it.
func Open(ctx context.Context, url string, opts ...Option) (*App, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	tr, err := transport.Open(transport.ContextWithLogger(ctx, cfg.logger), url)
	if err != nil {
		return nil, err
	}
	a := newApp(tr, cfg)
	a.owned = true
	a.log.Debug("babelqueue: opened", "url", transport.Redact(url), "queue", cfg.queue)
	return a, nil
}

// New builds an App around a transport the caller constructed (a client with custom
// TLS, tokens or auth, or a shared in-memory broker). The caller keeps ownership:
// [App.Close] leaves the transport open.
func New(tr transport.Transport, opts ...Option) (*App, error) {
	if tr == nil {
		return nil, fmt.Errorf("%w: transport is nil", ErrInvalidOption)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	return newApp(tr, cfg), nil
}

func buildConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if len(cfg.errs) > 0 {
		return cfg, errors.Join(cfg.errs...)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	return cfg, nil
}

func newApp(tr transport.Transport, cfg config) *App {
	caps := tr.Capabilities()
	a := &App{
		cfg:      cfg,
		tr:       tr,
		caps:     caps,
		log:      cfg.logger,
		handlers: map[string]*route{},
		hooks:    newHooks(cfg.observers),
		pol: settle.Policy{
			MaxAttempts:  cfg.maxAttempts,
			DeadLetter:   cfg.deadLetter,
			OnUnknownURN: settle.OnUnknown(cfg.onUnknownURN),
			RetryTiers:   cfg.retryTiers,
		},
	}
	a.publish = a.send
	a.dlq = settle.DeadLetterQueue(cfg.queue, cfg.deadLetterQueue, cfg.deadLetterSuffix, caps)
	a.workers = a.newWorkers()
	a.warnAtStart()
	return a
}

// warnAtStart logs the configurations in which poison is dropped rather than kept.
func (a *App) warnAtStart() {
	p := a.pol
	switch {
	case p.OnUnknownURN == settle.UnknownDelete && p.DLQOn():
		a.log.Warn("babelqueue: on_unknown_urn=delete drops poison bodies and schema-version rejections even though dead-lettering is on",
			"queue", a.cfg.queue)
	case a.caps.PoisonAlwaysDeadLetter:
	case !p.DLQOn() && a.caps.PoisonNeedsRetryTiers && len(p.RetryTiers) == 0 && p.OnUnknownURN != settle.UnknownDelete:
		a.log.Warn("babelqueue: poison records will be committed, dropped and logged: there is no DLQ and no retry tier; "+
			"enable dead-lettering to keep them in the DLQ, or set retry tiers for a bounded retry",
			"queue", a.cfg.queue)
	case !p.DLQOn() && !a.caps.HandOff && p.OnUnknownURN != settle.UnknownDelete:
		a.log.Info("babelqueue: dead-lettering is off: poison bodies and exhausted messages are dropped and logged after max_attempts",
			"queue", a.cfg.queue, "max_attempts", p.MaxAttempts)
	}
}

// Queue returns the queue the app consumes.
func (a *App) Queue() string { return a.cfg.queue }

// DeadLetterQueue returns the name of the app's dead-letter queue.
func (a *App) DeadLetterQueue() string { return a.dlq }

// Transport returns the transport the app runs on.
func (a *App) Transport() transport.Transport { return a.tr }

// Logger returns the app's logger.
func (a *App) Logger() *slog.Logger { return a.log }

// Close closes the app: later calls fail with [ErrClosed]. It closes the transport when
// the app opened it ([Open]); a transport given to [New] is left open for its owner.
// Call it after Run has returned.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	if !a.owned {
		return nil
	}
	return a.tr.Close(ctx)
}

// Health is a snapshot of what the app is doing, for readiness probes.
type Health struct {
	// Running reports that Run is running.
	Running bool
	// Consuming reports that Run holds an open consumer and its last receive did not
	// fail: the broker answers.
	Consuming bool
	// LastReceived is when the last delivery was received (zero: none yet).
	LastReceived time.Time
	// LastReceiveError is the last error a receive returned (nil: none since the
	// consumer opened), and LastReceiveErrorAt when.
	LastReceiveError   error
	LastReceiveErrorAt time.Time
}

// Health reports whether the app is consuming, and the last receive error.
func (a *App) Health() Health {
	a.mu.RLock()
	h := Health{Running: a.running}
	a.mu.RUnlock()
	st := a.workers.Status()
	h.Consuming = st.Consuming()
	h.LastReceived = st.LastReceived()
	h.LastReceiveErrorAt, h.LastReceiveError = st.LastReceiveError()
	return h
}

// Message is a delivery as a handler sees it.
type Message struct {
	// Envelope is the decoded envelope; Envelope.Raw() holds the received bytes. Treat
	// it as read-only: the runtime settles the delivery from the received bytes.
	Envelope *envelope.Envelope
	// Attempts is the reconciled attempts counter: 0 on a first delivery. A body
	// written with a negative attempts (the SPEC forbids it; another producer may not
	// care) is handed over as written, as the Python SDK does, and its retry is
	// re-published with attempts 0 (docs/settlement.md).
	Attempts int
	// Queue is the queue the message was consumed from.
	Queue string

	key       []byte
	headers   map[string]string
	unmarshal func([]byte, any) error // WithUnmarshal's; nil: encoding/json
}

// URN returns the message's URN.
func (m *Message) URN() string { return m.Envelope.Job }

// ID returns meta.id.
func (m *Message) ID() string { return m.Envelope.Meta.ID }

// TraceID returns the trace id. [App.Publish] called with the handler's context
// continues it without being told.
func (m *Message) TraceID() string { return m.Envelope.TraceID }

// Bind decodes the message's data into v, with encoding/json or the function given to
// [WithUnmarshal].
func (m *Message) Bind(v any) error { return m.Envelope.BindWith(v, m.unmarshal) }

// Key returns a copy of the record key; nil when the record has none.
func (m *Message) Key() []byte {
	if m.key == nil {
		return nil
	}
	return append([]byte{}, m.key...)
}

// Headers returns a copy of the out-of-band headers published with the message (a W3C
// traceparent, bq-replay-bypass); nil when there are none.
func (m *Message) Headers() map[string]string {
	if m.headers == nil {
		return nil
	}
	out := make(map[string]string, len(m.headers))
	for k, v := range m.headers {
		out[k] = v
	}
	return out
}

// Header returns one out-of-band header, "" when absent.
func (m *Message) Header(name string) string { return m.headers[name] }

// ReplayBypassHeader is the out-of-band header a redrive with bypass stamps on the
// messages it puts back ("1"), as every SDK of the family does.
const ReplayBypassHeader = "bq-replay-bypass"

// IsReplay reports whether the message was put back by a redrive with bypass: a handler
// skips external side effects (an e-mail, a charge) that already happened.
func (m *Message) IsReplay() bool { return m.headers[ReplayBypassHeader] == "1" }

// Handler processes one message. Returning an error, panicking or running past the
// handler timeout fails the delivery, which is then retried or dead-lettered; see
// [NoRetry] and [Requeue] for the other answers a handler can give.
type Handler func(ctx context.Context, m *Message) error

// Handle registers h for urn, replacing any earlier handler. mw wrap h alone, inside the
// app-wide middleware of [App.Use]: see [Middleware] for the order.
func (a *App) Handle(urn string, h Handler, mw ...Middleware) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &route{h: h, mw: append([]Middleware(nil), mw...)}
	r.chain = chain(chain(h, r.mw), a.appMW)
	a.handlers[urn] = r
}

// Handle registers a typed handler: the message's data is decoded into a T first
// ([Message.Bind]: encoding/json, or the function given to [WithUnmarshal]), and a body
// whose data does not decode into T fails the delivery.
func Handle[T any](a *App, urn string, h func(ctx context.Context, data T, m *Message) error, mw ...Middleware) {
	a.Handle(urn, func(ctx context.Context, m *Message) error {
		var v T
		if err := m.Bind(&v); err != nil {
			return fmt.Errorf("babelqueue: data of %s does not decode into %T: %w", urn, v, err)
		}
		return h(ctx, v, m)
	}, mw...)
}

func (a *App) handler(urn string) (Handler, bool) {
	a.mu.RLock()
	r, ok := a.handlers[urn]
	a.mu.RUnlock()
	if !ok {
		return nil, false
	}
	return r.chain, true
}
