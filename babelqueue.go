// Package babelqueue is the Go runtime of the BabelQueue polyglot queue standard: one
// strict JSON envelope, routed by URN, so a job produced by a PHP, Python, Java, .NET or
// Node service is consumed natively in Go, and back, over the broker a team already runs.
//
// An [App] is opened on a broker URL ([Open]) or around a transport ([New]). Handlers
// are registered per URN ([App.Handle], [Handle]); [App.Publish] sends an envelope;
// [App.Run] consumes with a pool of workers until its context ends and settles every
// delivery by the rules of the specification: retries with attempts+1, dead-lettering
// with a dead_letter block, the poison route for bodies that are not envelopes, the
// schema-version gate. Every write made to settle a delivery is confirmed by the broker
// before the delivery is acknowledged; when one fails the delivery is given back to the
// broker, so nothing is lost.
//
// The transport is chosen by the URL scheme. Import the broker packages you use:
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

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	_ "github.com/babelqueue-go/babelqueue/transport/memory" // memory:// is built in
)

// Version is the version of this SDK.
const Version = "0.1.0"

// ErrClosed is returned by an App used after Close.
var ErrClosed = errors.New("babelqueue: app closed")

// ErrRunning is returned by a second concurrent Run.
var ErrRunning = errors.New("babelqueue: already running")

// App is a BabelQueue runtime bound to one transport. Its methods are safe for
// concurrent use.
type App struct {
	cfg      config
	tr       transport.Transport
	caps     transport.Capabilities
	log      *slog.Logger
	dlq      string
	mu       sync.RWMutex
	handlers map[string]Handler
	running  bool
	closed   bool
}

// Open opens an App on the broker at url, choosing the transport by the URL's scheme
// (memory://, redis://, amqp://, kafka://, sqs://, sb://, pulsar://, artemis://). An
// unknown scheme is an error that names the known schemes and the package providing
// each. Credentials in url never appear in errors or logs.
func Open(ctx context.Context, url string, opts ...Option) (*App, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	tr, err := transport.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	a := newApp(tr, cfg)
	a.log.Debug("babelqueue: opened", "url", transport.Redact(url), "queue", cfg.queue)
	return a, nil
}

// New builds an App around a transport the caller constructed (a client with custom
// TLS, tokens or auth, or a shared in-memory broker).
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
		handlers: map[string]Handler{},
	}
	a.dlq = transport.DeadLetterQueue(cfg.queue, cfg.deadLetterQueue, cfg.deadLetterSuffix, caps)
	a.warnAtStart()
	return a
}

// warnAtStart logs the configurations in which poison is dropped rather than kept.
func (a *App) warnAtStart() {
	p := a.policy()
	switch {
	case p.OnUnknownURN == UnknownDelete && p.DLQOn():
		a.log.Warn("babelqueue: on_unknown_urn=delete drops poison bodies and schema-version rejections even though dead-lettering is on",
			"queue", a.cfg.queue)
	case a.caps.PoisonAlwaysDeadLetter:
	case !p.DLQOn() && a.caps.PoisonNeedsRetryTiers && len(p.RetryTiers) == 0 && p.OnUnknownURN != UnknownDelete:
		a.log.Warn("babelqueue: poison records will be committed, dropped and logged: there is no DLQ and no retry tier; "+
			"enable dead-lettering to keep them in the DLQ, or set retry tiers for a bounded retry",
			"queue", a.cfg.queue)
	case !p.DLQOn() && !a.caps.HandOff && p.OnUnknownURN != UnknownDelete:
		a.log.Info("babelqueue: dead-lettering is off: poison bodies and exhausted messages are dropped and logged after max_attempts",
			"queue", a.cfg.queue, "max_attempts", p.MaxAttempts)
	}
}

func (a *App) policy() Policy {
	return Policy{
		MaxAttempts:  a.cfg.maxAttempts,
		DeadLetter:   a.cfg.deadLetter,
		OnUnknownURN: a.cfg.onUnknownURN,
		RetryTiers:   a.cfg.retryTiers,
	}
}

// Queue returns the queue the app consumes.
func (a *App) Queue() string { return a.cfg.queue }

// DeadLetterQueue returns the name of the app's dead-letter queue.
func (a *App) DeadLetterQueue() string { return a.dlq }

// Transport returns the transport the app runs on.
func (a *App) Transport() transport.Transport { return a.tr }

// Close closes the transport. Call it after Run has returned.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	return a.tr.Close(ctx)
}

// Message is a delivery as a handler sees it.
type Message struct {
	// Envelope is the decoded envelope; Envelope.Raw() holds the received bytes.
	Envelope *envelope.Envelope
	// Attempts is the reconciled attempts counter: 0 on a first delivery.
	Attempts int
	// Queue is the queue the message was consumed from.
	Queue string
	// Key is the record key, nil when there is none.
	Key []byte
	// Headers are the out-of-band headers published with the message.
	Headers map[string]string
}

// URN returns the message's URN.
func (m *Message) URN() string { return m.Envelope.Job }

// ID returns meta.id.
func (m *Message) ID() string { return m.Envelope.Meta.ID }

// TraceID returns the trace id, to continue the trace in messages the handler publishes.
func (m *Message) TraceID() string { return m.Envelope.TraceID }

// Bind decodes the message's data into v.
func (m *Message) Bind(v any) error { return m.Envelope.Bind(v) }

// Handler processes one message. Returning an error, panicking or running past the
// handler timeout fails the delivery, which is then retried or dead-lettered.
type Handler func(ctx context.Context, m *Message) error

// Handle registers h for urn, replacing any earlier handler.
func (a *App) Handle(urn string, h Handler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handlers[urn] = h
}

// Handle registers a typed handler: the message's data is decoded into a T first, and a
// body whose data does not decode into T fails the delivery.
func Handle[T any](a *App, urn string, h func(ctx context.Context, data T, m *Message) error) {
	a.Handle(urn, func(ctx context.Context, m *Message) error {
		var v T
		if err := m.Bind(&v); err != nil {
			return fmt.Errorf("babelqueue: data of %s does not decode into %T: %w", urn, v, err)
		}
		return h(ctx, v, m)
	})
}

func (a *App) handler(urn string) (Handler, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	h, ok := a.handlers[urn]
	return h, ok
}
