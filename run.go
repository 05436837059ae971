package babelqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/internal/worker"
	"github.com/babelqueue-go/babelqueue/transport"
)

// UnsupportedSchemaRoute is the reserved route prefix of deliveries rejected by the
// schema-version gate (docs/settlement.md). No handler can match it.
const UnsupportedSchemaRoute = "babelqueue:unsupported-schema-version:"

// Dead-letter reasons, as every SDK of the family writes them in dead_letter.reason.
const (
	ReasonFailed     = "failed"
	ReasonUnknownURN = "unknown_urn"
	ReasonPoison     = "poison"
)

// Run consumes the app's queue with the configured number of workers until ctx ends.
// Then it stops receiving, lets in-flight handlers finish within the shutdown grace,
// settles them, and returns nil. Deliveries whose handler is still running after the
// grace are given back to the broker. A receive that fails (the broker went away) is
// logged and retried with a backoff of up to 2 s; Run returns an error only when the
// consumer is closed under it.
func (a *App) Run(ctx context.Context) error {
	a.mu.Lock()
	switch {
	case a.closed:
		a.mu.Unlock()
		return ErrClosed
	case a.running:
		a.mu.Unlock()
		return ErrRunning
	}
	a.running = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.running = false
		a.mu.Unlock()
	}()
	return a.workers.Run(ctx, a.tr)
}

// newWorkers makes the app's pool of workers (internal/worker), which consumes,
// handles and settles for Run.
func (a *App) newWorkers() *worker.Pool[Message] {
	cfg := &a.cfg
	return worker.New(worker.Config{
		Queue:              cfg.queue,
		Concurrency:        cfg.concurrency,
		Prefetch:           cfg.prefetch,
		HandlerTimeout:     cfg.handlerTimeout,
		ShutdownGrace:      cfg.shutdownGrace,
		SettleTimeout:      cfg.settleTimeout,
		Now:                cfg.now,
		Policy:             a.pol,
		Caps:               a.caps,
		DeadLetterQueue:    a.dlq,
		DeadLetterOverride: cfg.deadLetterQueue,
		DeadLetterSuffix:   cfg.deadLetterSuffix,
		Log:                a.log,
	}, workerApp{a}, &a.hooks, a.hooks.observing())
}

// workerApp is the app as its workers see it: the message, the handlers and the
// handler's answers in the user's types.
type workerApp struct{ a *App }

// FillMessage makes m the message a handler is given.
func (w workerApp) FillMessage(m *Message, env *envelope.Envelope, attempts int, d *transport.Delivery) {
	*m = Message{Envelope: env, Attempts: attempts, Queue: d.Queue, key: d.Key, headers: d.Headers, unmarshal: w.a.cfg.unmarshal}
}

// Handler returns the handler of urn, its middleware around it.
func (w workerApp) Handler(urn string) (worker.Handler[Message], bool) {
	h, ok := w.a.handler(urn)
	return worker.Handler[Message](h), ok
}

// AnswerReader returns a worker's reader of its handlers' errors.
func (workerApp) AnswerReader() func(error) (settle.Kind, time.Duration, error) {
	var f failureTargets
	return f.classify
}

// UnknownURN is the failure of a URN without a handler.
func (workerApp) UnknownURN(urn string) error { return &UnknownURNError{URN: urn} }

// Panicked is the failure of a handler that panicked.
func (workerApp) Panicked(v any, stack []byte) error { return &PanicError{Value: v, Stack: stack} }

// TimedOut is the failure of a handler that ran past the timeout.
func (workerApp) TimedOut(timeout time.Duration) error {
	return fmt.Errorf("%w after %s", ErrHandlerTimeout, timeout)
}
