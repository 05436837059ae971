package babelqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
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
		a.consuming.Store(false)
		a.mu.Lock()
		a.running = false
		a.mu.Unlock()
	}()

	c, err := a.tr.Consume(ctx, a.cfg.queue, a.consumeOptions())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("babelqueue: consume %q: %w", a.cfg.queue, err)
	}
	a.lastRecvErr.Store(nil)
	a.consuming.Store(true)
	a.log.Info("babelqueue: consuming", "queue", a.cfg.queue, "workers", a.cfg.concurrency)

	var (
		active   sync.WaitGroup
		fatalMu  sync.Mutex
		fatalErr error
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	workers := make([]*worker, a.cfg.concurrency)
	for i := range workers {
		w := newWorker(a, runCtx, c, &active)
		workers[i] = w
		active.Add(1)
		go func() {
			if err := w.loop(); err != nil {
				fatalMu.Lock()
				if fatalErr == nil {
					fatalErr = err
				}
				fatalMu.Unlock()
				stop()
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { active.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-runCtx.Done():
		// Stop receiving; in-flight handlers get the shutdown grace to finish.
		grace := time.NewTimer(a.cfg.shutdownGrace)
		select {
		case <-allDone:
		case <-grace.C:
			for _, w := range workers {
				w.abandon()
			}
			<-allDone // the workers still settling finish within the settle timeout
		}
		grace.Stop()
	}
	a.consuming.Store(false)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.settleTimeout)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		a.log.Warn("babelqueue: closing the consumer", "queue", a.cfg.queue, "error", err)
	}
	a.log.Info("babelqueue: stopped", "queue", a.cfg.queue)
	return fatalErr
}

// worker is one of Run's goroutines: it receives, runs the handler on its own goroutine
// (or, with a handler timeout, on one it watches) and settles. What it shares with Run
// is the hand-over at the end of the shutdown grace (abandon).
type worker struct {
	a        *App
	ctx      context.Context // ends when Run stops receiving
	c        transport.Consumer
	active   *sync.WaitGroup
	detached context.Context // handlers and settlements outlive ctx

	// hctx is the base of every handler context: cancelled when the worker is
	// abandoned or exits.
	hctx    context.Context
	hcancel context.CancelFunc

	// The settle context is reused while it has at least half of the settle timeout
	// left, so a settlement does not cost a timer.
	sctx      context.Context
	scancel   context.CancelFunc
	sdeadline time.Time

	// failed holds the errors.As targets that read a handler's error, reused so that
	// a failure allocates none.
	failed failureTargets

	mu        sync.Mutex
	current   delivery // the delivery whose handler runs, when busy
	busy      bool
	abandoned bool
	released  bool // active.Done was called
}

func newWorker(a *App, ctx context.Context, c transport.Consumer, active *sync.WaitGroup) *worker {
	w := &worker{a: a, ctx: ctx, c: c, active: active, detached: context.WithoutCancel(ctx)}
	w.hctx, w.hcancel = context.WithCancel(w.detached)
	return w
}

// release marks the worker finished for Run, once.
func (w *worker) release() {
	if !w.released {
		w.released = true
		w.active.Done()
	}
}

// abandon is called by Run when the shutdown grace ran out: a delivery whose handler
// still runs is given back to the broker, the handler's context is cancelled, and Run
// no longer waits for this worker. When the handler returns at last, nothing more is
// done with its delivery.
func (w *worker) abandon() {
	w.mu.Lock()
	x := w.current
	if !w.busy || w.abandoned {
		w.mu.Unlock()
		return
	}
	w.abandoned = true
	w.release()
	w.mu.Unlock()
	w.hcancel()
	a := w.a
	a.log.Warn("babelqueue: handler outlived the shutdown grace; giving the delivery back to the broker",
		"queue", x.d.Queue, "urn", x.route, "id", x.env.Meta.ID)
	ctx, cancel := context.WithTimeout(w.detached, a.cfg.settleTimeout)
	defer cancel()
	a.settle(ctx, w.c, x, settle.Decision{Action: settle.ActRewind}, x.info(), time.Time{}) // hooks see the delivery given back
}

func (w *worker) loop() error {
	defer func() {
		w.mu.Lock()
		w.release()
		w.mu.Unlock()
		w.hcancel()
		if w.scancel != nil {
			w.scancel()
		}
	}()
	a := w.a
	// At most 2 s: the workers resume within about 2 s of the broker coming back.
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for w.ctx.Err() == nil {
		d, err := w.c.Receive(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, transport.ErrClosed) {
				return fmt.Errorf("babelqueue: consumer of %q closed: %w", a.cfg.queue, err)
			}
			a.consuming.Store(false)
			a.lastRecvErr.Store(&receiveFailure{err: err, at: a.cfg.now()})
			a.log.Warn("babelqueue: receive failed; retrying", "queue", a.cfg.queue, "error", err, "backoff", backoff)
			for _, h := range a.hooks.receiveError {
				h.OnReceiveError(w.ctx, ReceiveErrorEvent{Queue: a.cfg.queue, Err: err, Backoff: backoff})
			}
			t := time.NewTimer(backoff)
			select {
			case <-w.ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		if backoff != minBackoff {
			backoff = minBackoff
			a.log.Info("babelqueue: receiving again", "queue", a.cfg.queue)
		}
		if !a.consuming.Load() {
			a.consuming.Store(true)
		}
		now := time.Now()
		a.lastReceived.Store(now.UnixNano())
		if !w.process(d, now) {
			return nil // abandoned at the end of the shutdown grace
		}
	}
	return nil
}

// settleContext is the context of one settlement: at least half the settle timeout,
// at most all of it.
func (w *worker) settleContext(now time.Time) context.Context {
	limit := w.a.cfg.settleTimeout
	if w.sctx == nil || w.sdeadline.Sub(now) < limit/2 || w.sctx.Err() != nil {
		if w.scancel != nil {
			w.scancel()
		}
		w.sctx, w.scancel = context.WithTimeout(w.detached, limit)
		w.sdeadline = now.Add(limit)
	}
	return w.sctx
}

// delivery is what the runtime learned about one delivery before settling it.
type delivery struct {
	d       *transport.Delivery
	env     *envelope.Envelope // nil for poison and schema rejections
	facts   settle.Facts
	cause   error  // why it failed, was poison or was rejected
	route   string // the URN, or the reserved route of a rejection
	message *Message
	hctx    *handlerContext // the handler's context, allocated with the message
	hooks   *hookContexts   // the hooks' contexts, allocated with it when there are hooks
}

// messageAndContext puts a handler's message and context in one allocation.
type messageAndContext struct {
	msg Message
	ctx handlerContext
}

// classify reads a delivery: the schema-version gate, the body, the attempts.
func (a *App) classify(d *transport.Delivery) delivery {
	x := delivery{d: d}
	if a.caps.SchemaGate {
		if ok, shown := settle.GateSchemaVersion(d.SchemaVersion, a.caps.SchemaGateAcceptsInteger); !ok {
			x.facts = settle.Facts{Kind: settle.SchemaRejected, Attempts: settle.ReconcileAttempts(a.caps.Attempts, 0, false, d)}
			x.route = UnsupportedSchemaRoute + shown
			x.cause = fmt.Errorf("babelqueue: unsupported schema version %q", shown)
			return x
		}
	}
	env, err := envelope.Decode(d.Body)
	if err == nil {
		err = env.Accepts()
	}
	if err != nil {
		x.facts = settle.Facts{Kind: settle.Poison, Attempts: a.poisonAttempts(d)}
		x.cause = err
		return x
	}
	x.env = env
	x.route = env.Job
	attempts := settle.ReconcileAttempts(a.caps.Attempts, env.Attempts, true, d)
	x.facts = settle.Facts{Kind: settle.Handled, Attempts: attempts}
	msg := Message{Envelope: env, Attempts: attempts, Queue: d.Queue, key: d.Key, headers: d.Headers, unmarshal: a.cfg.unmarshal}
	var mc *messageAndContext
	if a.hooks.any() {
		mh := &messageWithHooks{messageAndContext: messageAndContext{msg: msg}}
		mc, x.hooks = &mh.messageAndContext, &mh.hooks
	} else {
		mc = &messageAndContext{msg: msg}
	}
	mc.ctx.m = &mc.msg
	x.message, x.hctx = &mc.msg, &mc.ctx
	return x
}

// poisonAttempts is the attempts counter of a poison body: the transport's attempts
// header (a bounded retry re-publishes poison unchanged and counts there) or the
// body's own attempts member when it is a readable integer, whichever is larger
// (Kafka: the header when present, as for every record). It is never below 0: the
// Python SDK counts a poison body's negative attempts as 0 too.
func (a *App) poisonAttempts(d *transport.Delivery) int {
	n, ok := envelope.PeekAttempts(d.Body)
	if a.caps.Attempts == transport.AttemptsHeaderAuthoritative {
		return max(settle.ReconcileAttempts(a.caps.Attempts, n, ok, d), 0)
	}
	got := settle.ReconcileAttempts(a.caps.Attempts, 0, false, d)
	if ok && n > got {
		got = n
	}
	return got
}

// info describes a classified delivery to hooks.
func (x *delivery) info() DeliveryInfo {
	di := DeliveryInfo{
		Queue: x.d.Queue, URN: x.route, Attempts: x.facts.Attempts, BodySize: len(x.d.Body),
		Poison: x.facts.Kind == settle.Poison, Rejected: x.facts.Kind == settle.SchemaRejected,
		Headers: x.d.Headers,
	}
	if x.env != nil {
		di.ID, di.TraceID, di.Lang, di.CreatedAt = x.env.Meta.ID, x.env.TraceID, x.env.Meta.Lang, x.env.Meta.CreatedAt
	}
	return di
}

// handlerContext is the context a handler runs under: the worker's handler context
// carrying the message (MessageFromContext). It is allocated with the message.
type handlerContext struct {
	context.Context
	m *Message
}

// Value returns the message for messageKey, else asks the parent.
func (c *handlerContext) Value(key any) any {
	if key == (messageKey{}) {
		return c.m
	}
	return c.Context.Value(key)
}

// process handles one delivery and settles it. It reports false when the worker was
// abandoned while the handler ran (Run has given the delivery back and returned).
func (w *worker) process(d *transport.Delivery, now time.Time) bool {
	a := w.a
	x := a.classify(d)
	var di DeliveryInfo
	hookCtx := w.ctx
	if a.hooks.any() {
		hookCtx = x.hookContext(hookReceive, w.ctx)
		di = x.info()
		for _, h := range a.hooks.receive {
			h.OnReceive(hookCtx, di)
		}
	}
	var settleStart time.Time // when the handler returned, if a hook timed it
	if x.env != nil {
		h, ok := a.handler(x.env.Job)
		if !ok {
			x.facts.Kind = settle.UnknownURN
			x.cause = &UnknownURNError{URN: x.env.Job}
		} else {
			w.mu.Lock()
			w.current, w.busy = x, true
			w.mu.Unlock()
			var start time.Time
			if len(a.hooks.handled) > 0 {
				start = time.Now()
			}
			err := w.invoke(h, x.hctx)
			w.mu.Lock()
			w.current, w.busy = delivery{}, false
			abandoned := w.abandoned
			w.mu.Unlock()
			if abandoned {
				return false
			}
			if len(a.hooks.handled) > 0 {
				// One clock read ends the handler's time and starts the settlement's.
				took := time.Since(start)
				settleStart = start.Add(took)
				for _, hk := range a.hooks.handled {
					hk.OnHandled(hookCtx, HandledEvent{Delivery: di, Start: start, Duration: took, Err: err})
				}
			}
			if err != nil {
				x.facts.Kind, x.facts.After, x.cause = w.failed.classify(err)
			}
		}
	}
	a.settle(w.settleContext(now), w.c, x, settle.Decide(x.facts, a.pol, a.caps), di, settleStart)
	return true
}

// failureTargets are the errors.As targets that read a handler's error. A worker
// keeps one set (it reads one error at a time): targets on the heap, which errors.As
// needs, cost no allocation per failure.
type failureTargets struct {
	requeue *RequeueError
	noRetry *NoRetryError
}

// classify reads a handler's error: a requeue, a failure not to retry, or a failure.
func (f *failureTargets) classify(err error) (settle.Kind, time.Duration, error) {
	defer func() { f.requeue, f.noRetry = nil, nil }() // keep no error alive
	if errors.As(err, &f.requeue) {
		return settle.Requeued, f.requeue.After, err
	}
	if errors.As(err, &f.noRetry) {
		return settle.Unretryable, 0, f.noRetry.Err
	}
	return settle.Failed, 0, err
}

// invoke runs h, turning a panic into a failure. Without a handler timeout it runs on
// the worker's goroutine; with one, on its own goroutine, and a handler that runs past
// the timeout has failed (its context is cancelled; what it does later is ignored).
func (w *worker) invoke(h Handler, hc *handlerContext) error {
	a := w.a
	m := hc.m
	hc.Context = w.hctx
	if a.cfg.handlerTimeout <= 0 {
		return callHandler(hc, h, m)
	}
	hctx, cancel := context.WithTimeout(hc, a.cfg.handlerTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- callHandler(hctx, h, m) }()
	t := time.NewTimer(a.cfg.handlerTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w after %s", ErrHandlerTimeout, a.cfg.handlerTimeout)
	}
}

// callHandler calls h, turning a panic into a *PanicError.
func callHandler(ctx context.Context, h Handler, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h(ctx, m)
}

// settle carries out a decision. A settlement whose writes were not confirmed is
// rewound, so the broker delivers the message again: nothing is lost. start is when the
// settlement began for the settle hooks' Duration (the handler's end, already read for
// the handle hooks); zero reads the clock here when a settle hook wants it.
func (a *App) settle(sctx context.Context, c transport.Consumer, x delivery, dec settle.Decision, di DeliveryInfo, start time.Time) {
	if len(a.hooks.settled) > 0 && start.IsZero() {
		start = time.Now()
	}
	s, dec := a.buildSettlement(x, dec)
	err := c.Settle(sctx, x.d, s)
	if len(a.hooks.settled) > 0 {
		a.tellSettled(sctx, x, dec, s, di, err, start)
	}
	if err == nil {
		a.logOutcome(x, dec)
		return
	}
	if errors.Is(err, transport.ErrAlreadySettled) {
		a.log.Warn("babelqueue: delivery was already settled (the broker took it back)", "queue", x.d.Queue, "urn", x.route, "error", err)
		return
	}
	if errors.Is(err, transport.ErrTooLarge) && a.settleTooLarge(sctx, c, x, dec, di, err) {
		return
	}
	a.log.Error("babelqueue: settlement failed; rewinding so the broker redelivers",
		"queue", x.d.Queue, "urn", x.route, "action", dec.Action.String(), "error", err)
	if s.Outcome == transport.Rewind {
		return
	}
	if rerr := c.Settle(sctx, x.d, transport.Settlement{Outcome: transport.Rewind}); rerr != nil && !errors.Is(rerr, transport.ErrAlreadySettled) {
		a.log.Error("babelqueue: rewind failed; the broker will redeliver after its own timeout",
			"queue", x.d.Queue, "urn", x.route, "error", rerr)
	}
}

// buildSettlement turns a decision into the consumer's settlement. A settlement that
// cannot be built (a body the editor refuses) is logged and routed on a simpler path,
// never rewound: a rewind would bring the same bytes back to fail the same way, for
// ever. A retry or release that cannot be built is dead-lettered with the received
// bytes (or dropped with the DLQ off); a dead-letter body that cannot be built is
// written as the received bytes.
func (a *App) buildSettlement(x delivery, dec settle.Decision) (transport.Settlement, settle.Decision) {
	s, err := a.settlement(x, dec)
	if err == nil {
		return s, dec
	}
	fallback := settle.Decision{Action: settle.ActRawDeadLetter, Attempts: dec.Attempts}
	if !a.pol.DLQOn() {
		fallback = settle.Decision{Action: settle.ActDrop, Reason: "the settle write could not be built", Attempts: dec.Attempts}
	}
	a.log.Error("babelqueue: cannot build the settle write; routing the delivery as received instead",
		"queue", x.d.Queue, "urn", x.route, "action", dec.Action.String(), "instead", fallback.Action.String(), "error", err)
	s, err = a.settlement(x, fallback)
	if err != nil { // unreachable: raw and drop settlements need no editing
		return transport.Settlement{Outcome: transport.Rewind}, settle.Decision{Action: settle.ActRewind}
	}
	return s, fallback
}

func (a *App) tellSettled(ctx context.Context, x delivery, dec settle.Decision, s transport.Settlement, di DeliveryInfo, err error, start time.Time) {
	ev := SettledEvent{
		Delivery: di, Kind: Kind(x.facts.Kind.String()), Action: Action(dec.Action.String()),
		Reason: dec.Reason, Attempts: dec.Attempts, Cause: x.cause, Err: err, Duration: time.Since(start),
	}
	for _, w := range s.Writes {
		ev.Writes = append(ev.Writes, Write{Queue: w.Queue, Delay: w.Delay})
	}
	ctx = x.hookContext(hookSettle, ctx)
	for _, h := range a.hooks.settled {
		h.OnSettled(ctx, ev)
	}
}

// settleWrite is a settlement's one write and the slice that holds it, in one
// allocation.
type settleWrite struct {
	msg    transport.Message
	writes [1]*transport.Message
}

// settlement is the consumer's settlement of a decision: the outcome and the writes
// it makes (a retry, a release or a dead letter writes one message).
func (a *App) settlement(x delivery, dec settle.Decision) (transport.Settlement, error) {
	d := x.d
	write := func(queue string, body []byte, attempts int, delay time.Duration) transport.Settlement {
		w := &settleWrite{msg: transport.Message{Queue: queue, Body: body, Key: d.Key, Headers: d.Headers, Attempts: attempts, Delay: delay}}
		if x.env != nil {
			w.msg.Projection = transport.ProjectionOf(x.env)
		}
		w.writes[0] = &w.msg
		return transport.Settlement{Outcome: transport.Ack, Writes: w.writes[:]}
	}
	dlq := a.deadLetterQueueOf(d.Queue)
	switch dec.Action {
	case settle.ActAck, settle.ActDrop:
		return transport.Settlement{Outcome: transport.Ack}, nil
	case settle.ActRetry:
		var body []byte
		var err error
		if x.env != nil { // its envelope was decoded from d.Body
			body, err = x.env.RetryBody(dec.Attempts)
		} else {
			body, err = envelope.SetAttempts(d.Body, dec.Attempts)
		}
		if err != nil {
			return transport.Settlement{}, err
		}
		return write(d.Queue, body, dec.Attempts, dec.Delay), nil
	case settle.ActRelease:
		return write(d.Queue, d.Body, dec.Attempts, dec.Delay), nil
	case settle.ActDeadLetter:
		dl := envelope.DeadLetter{
			Reason:        dec.Reason,
			FailedAt:      a.cfg.now().UnixMilli(),
			OriginalQueue: d.Queue,
			Attempts:      dec.Attempts,
			Lang:          envelope.Lang,
		}
		// An unknown URN dead-lettered by strategy has no error; a failure carries its
		// error and type, as the other SDKs write them.
		if x.cause != nil && !(x.facts.Kind == settle.UnknownURN && a.pol.OnUnknownURN == settle.UnknownDeadLetter) {
			msg, typ := x.cause.Error(), exceptionName(x.cause)
			dl.Error, dl.Exception = &msg, &typ
		}
		// The dead-lettered body records the attempts made, like the dead_letter block
		// (DeadLetterBody); an immediate dead-letter by strategy made no attempt and
		// only appends the block.
		var body []byte
		var err error
		if immediate := x.facts.Kind == settle.UnknownURN && a.pol.OnUnknownURN == settle.UnknownDeadLetter; x.env != nil && !immediate {
			body, err = x.env.DeadLetterBody(dl)
		} else {
			body, err = envelope.AppendDeadLetter(d.Body, dl)
		}
		if err != nil {
			return transport.Settlement{}, err
		}
		return write(dlq, body, dec.Attempts, 0), nil
	case settle.ActPoisonDeadLetter:
		dl := envelope.PoisonDeadLetter(x.cause, d.Queue, dec.Attempts, a.cfg.now().UnixMilli())
		if x.cause != nil {
			typ := exceptionName(x.cause)
			dl.Exception = &typ
		}
		return write(dlq, envelope.PoisonBody(d.Body, dl), dec.Attempts, 0), nil
	case settle.ActPoisonRetry:
		return write(d.Queue, d.Body, dec.Attempts, dec.Delay), nil
	case settle.ActRawDeadLetter:
		return write(dlq, d.Body, dec.Attempts, 0), nil
	case settle.ActHandOff:
		return transport.Settlement{Outcome: transport.HandOff}, nil
	default:
		return transport.Settlement{Outcome: transport.Rewind}, nil
	}
}

// exceptionName is the dead_letter "exception" of an error: its Go type name, without
// the pointer star ("errors.errorString", "babelqueue.PanicError").
func exceptionName(err error) string {
	if err == nil {
		return "<nil>" // what %T prints for nil
	}
	return strings.TrimPrefix(reflect.TypeOf(err).String(), "*") // what %T prints, without formatting
}

// logOutcome logs a settlement at its level. A plain success, a retry and a release
// (the handler asked for one) are Debug: they are the policy working, as the reference
// SDK (Python 1.24.0) logs none of them either, and a line per failed attempt would make
// a failure storm a log storm (the dead-letter queue, the settle hooks and the metrics
// record them). A poison retry, a hand-off and a rewind are Info; a drop and a dead
// letter Warn; a settlement that failed is logged at Error by settle.
func (a *App) logOutcome(x delivery, dec settle.Decision) {
	level := slog.LevelDebug
	switch dec.Action {
	case settle.ActPoisonRetry, settle.ActHandOff, settle.ActRewind:
		level = slog.LevelInfo
	case settle.ActDrop, settle.ActDeadLetter, settle.ActPoisonDeadLetter, settle.ActRawDeadLetter:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !a.log.Enabled(ctx, level) {
		return // a handled message at the default level costs no attributes
	}
	// slog.Attr values and a message per kind: the line is the same, without a boxed
	// value or a concatenation per attribute.
	var buf [9]slog.Attr
	attrs := append(buf[:0], slog.String("queue", x.d.Queue), slog.String("urn", x.route),
		slog.String("action", dec.Action.String()), slog.Int("attempts", x.facts.Attempts))
	if x.env != nil {
		attrs = append(attrs, slog.String("id", x.env.Meta.ID))
	}
	if x.cause != nil {
		attrs = append(attrs, slog.String("error", x.cause.Error()))
	}
	switch dec.Action {
	case settle.ActRetry, settle.ActRelease, settle.ActPoisonRetry, settle.ActHandOff, settle.ActRewind:
		if dec.Delay > 0 {
			attrs = append(attrs, slog.Duration("delay", dec.Delay))
		}
	case settle.ActDrop:
		attrs = append(attrs, slog.String("reason", dec.Reason))
	case settle.ActDeadLetter, settle.ActPoisonDeadLetter, settle.ActRawDeadLetter:
		attrs = append(attrs, slog.String("dead_letter_queue", a.deadLetterQueueOf(x.d.Queue)))
		if dec.Reason != "" {
			attrs = append(attrs, slog.String("reason", dec.Reason))
		}
	}
	a.log.LogAttrs(ctx, level, settledMessage(x.facts.Kind), attrs...)
}

// settledMessages are the messages of the settlement log lines, one per kind, made once
// from the kinds' names.
var settledMessages = func() (m [settle.Requeued + 1]string) {
	for k := range m {
		m[k] = "babelqueue: settled " + settle.Kind(k).String()
	}
	return m
}()

// settledMessage is the message of a settlement's log line.
func settledMessage(k settle.Kind) string {
	if k >= 0 && int(k) < len(settledMessages) {
		return settledMessages[k]
	}
	return "babelqueue: settled " + k.String()
}

// deadLetterQueueOf is the dead-letter queue of a delivery's queue: the app's own,
// computed once, for the queue it consumes.
func (a *App) deadLetterQueueOf(queue string) string {
	if queue == a.cfg.queue {
		return a.dlq
	}
	return settle.DeadLetterQueue(queue, a.cfg.deadLetterQueue, a.cfg.deadLetterSuffix, a.caps)
}
