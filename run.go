package babelqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ErrHandlerTimeout is the failure of a handler that ran past the handler timeout.
var ErrHandlerTimeout = errors.New("babelqueue: handler timed out")

// errAbandoned marks a handler still running when the shutdown grace ran out.
var errAbandoned = errors.New("babelqueue: handler still running at the end of the shutdown grace")

// PanicError is the failure of a handler that panicked.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error describes the panic.
func (e *PanicError) Error() string { return fmt.Sprintf("babelqueue: handler panicked: %v", e.Value) }

// UnknownURNError is the failure of a valid envelope whose URN has no handler. Its text
// is the one every BabelQueue SDK writes into the dead_letter block.
type UnknownURNError struct {
	// URN is the URN that has no handler.
	URN string
}

// Error names the URN.
func (e *UnknownURNError) Error() string { return "No handler mapped for URN [" + e.URN + "]." }

// UnsupportedSchemaRoute is the reserved route prefix of deliveries rejected by the
// schema-version gate (SPEC §6). No handler can match it.
const UnsupportedSchemaRoute = "babelqueue:unsupported-schema-version:"

// Run consumes the app's queue with the configured number of workers until ctx ends.
// Then it stops receiving, lets in-flight handlers finish within the shutdown grace,
// settles them, and returns nil. Deliveries whose handler is still running after the
// grace are given back to the broker.
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

	c, err := a.tr.Consume(ctx, a.cfg.queue, transport.ConsumeOptions{Prefetch: a.cfg.concurrency})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("babelqueue: consume %q: %w", a.cfg.queue, err)
	}
	a.log.Info("babelqueue: consuming", "queue", a.cfg.queue, "workers", a.cfg.concurrency)

	var (
		wg       sync.WaitGroup
		fatalMu  sync.Mutex
		fatalErr error
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for range a.cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.worker(runCtx, c); err != nil {
				fatalMu.Lock()
				if fatalErr == nil {
					fatalErr = err
				}
				fatalMu.Unlock()
				stop()
			}
		}()
	}
	wg.Wait()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.settleTimeout)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		a.log.Warn("babelqueue: closing the consumer", "queue", a.cfg.queue, "error", err)
	}
	a.log.Info("babelqueue: stopped", "queue", a.cfg.queue)
	return fatalErr
}

func (a *App) worker(ctx context.Context, c transport.Consumer) error {
	backoff := 50 * time.Millisecond
	// Handlers and settlements outlive ctx (the shutdown grace, the settle timeout):
	// they run under this context, made once per worker.
	detached := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		d, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, transport.ErrClosed) {
				return fmt.Errorf("babelqueue: consumer of %q closed: %w", a.cfg.queue, err)
			}
			a.log.Warn("babelqueue: receive failed; retrying", "queue", a.cfg.queue, "error", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		a.process(ctx, detached, c, d)
	}
	return nil
}

// delivery is what the runtime learned about one delivery before settling it.
type delivery struct {
	d       *transport.Delivery
	env     *envelope.Envelope // nil for poison and schema rejections
	facts   Facts
	cause   error  // why it failed, was poison or was rejected
	route   string // the URN, or the reserved route of a rejection
	message *Message
}

// classify reads a delivery: the schema-version gate, the body, the attempts.
func (a *App) classify(d *transport.Delivery) delivery {
	x := delivery{d: d}
	if a.caps.SchemaGate {
		if ok, shown := GateSchemaVersion(d.SchemaVersion, a.caps.SchemaGateAcceptsInteger); !ok {
			x.facts = Facts{Kind: SchemaRejected, Attempts: transport.ReconcileAttempts(a.caps.Attempts, 0, false, d)}
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
		x.facts = Facts{Kind: Poison, Attempts: transport.ReconcileAttempts(a.caps.Attempts, 0, false, d)}
		x.cause = err
		return x
	}
	x.env = env
	x.route = env.Job
	attempts := transport.ReconcileAttempts(a.caps.Attempts, env.Attempts, true, d)
	x.facts = Facts{Kind: Handled, Attempts: attempts}
	x.message = &Message{Envelope: env, Attempts: attempts, Queue: d.Queue, Key: d.Key, Headers: d.Headers}
	return x
}

// process handles one delivery and settles it. ctx ends when Run stops; detached is
// context.WithoutCancel(ctx).
func (a *App) process(ctx, detached context.Context, c transport.Consumer, d *transport.Delivery) {
	x := a.classify(d)
	if x.env != nil {
		h, ok := a.handler(x.env.Job)
		if !ok {
			x.facts.Kind = UnknownURN
			x.cause = &UnknownURNError{URN: x.env.Job}
		} else {
			err := a.invoke(ctx, detached, h, x.message)
			switch {
			case errors.Is(err, errAbandoned):
				a.log.Warn("babelqueue: handler outlived the shutdown grace; giving the delivery back to the broker",
					"queue", d.Queue, "urn", x.route, "id", x.env.Meta.ID)
				a.settle(detached, c, x, Decision{Action: ActRewind})
				return
			case err != nil:
				x.facts.Kind = Failed
				x.cause = err
			}
		}
	}
	a.settle(detached, c, x, Decide(x.facts, a.policy(), a.caps))
}

// invoke runs h, turning a panic or a timeout into a failure. Once ctx ends the
// handler has the shutdown grace to finish; its own context is cancelled after it.
func (a *App) invoke(ctx, detached context.Context, h Handler, m *Message) error {
	hctx, cancel := context.WithCancel(detached)
	defer cancel()
	var timeout <-chan time.Time
	if a.cfg.handlerTimeout > 0 {
		t := time.NewTimer(a.cfg.handlerTimeout)
		defer t.Stop()
		timeout = t.C
		var dcancel context.CancelFunc
		hctx, dcancel = context.WithTimeout(hctx, a.cfg.handlerTimeout)
		defer dcancel()
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- &PanicError{Value: r, Stack: debug.Stack()}
			}
		}()
		done <- h(hctx, m)
	}()
	stopping := ctx.Done()
	var grace <-chan time.Time
	for {
		select {
		case err := <-done:
			return err
		case <-timeout:
			return fmt.Errorf("%w after %s", ErrHandlerTimeout, a.cfg.handlerTimeout)
		case <-stopping:
			stopping = nil
			t := time.NewTimer(a.cfg.shutdownGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			return errAbandoned
		}
	}
}

// settle carries out a decision. A settlement whose writes were not confirmed is
// rewound, so the broker delivers the message again: nothing is lost.
func (a *App) settle(detached context.Context, c transport.Consumer, x delivery, dec Decision) {
	sctx, cancel := context.WithTimeout(detached, a.cfg.settleTimeout)
	defer cancel()
	s, err := a.settlement(x, dec)
	if err != nil {
		// The body could not be edited; give it back rather than lose it.
		a.log.Error("babelqueue: cannot build the settle write; rewinding", "queue", x.d.Queue, "urn", x.route, "error", err)
		s, dec = transport.Settlement{Outcome: transport.Rewind}, Decision{Action: ActRewind}
	}
	err = c.Settle(sctx, x.d, s)
	if err == nil {
		a.logOutcome(x, dec)
		return
	}
	if errors.Is(err, transport.ErrAlreadySettled) {
		a.log.Warn("babelqueue: delivery was already settled (the broker took it back)", "queue", x.d.Queue, "urn", x.route, "error", err)
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

func (a *App) settlement(x delivery, dec Decision) (transport.Settlement, error) {
	d := x.d
	write := func(queue string, body []byte, attempts int, delay time.Duration) transport.Settlement {
		m := &transport.Message{Queue: queue, Body: body, Key: d.Key, Headers: d.Headers, Attempts: attempts, Delay: delay}
		if x.env != nil {
			m.Projection = ProjectionOf(x.env)
		}
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{m}}
	}
	dlq := a.deadLetterQueueOf(d.Queue)
	switch dec.Action {
	case ActAck, ActDrop:
		return transport.Settlement{Outcome: transport.Ack}, nil
	case ActRetry:
		body, err := envelope.SetAttempts(d.Body, dec.Attempts)
		if err != nil {
			return transport.Settlement{}, err
		}
		return write(d.Queue, body, dec.Attempts, dec.Delay), nil
	case ActRelease:
		return write(d.Queue, d.Body, dec.Attempts, 0), nil
	case ActDeadLetter:
		dl := envelope.DeadLetter{
			Reason:        dec.Reason,
			FailedAt:      a.cfg.now().UnixMilli(),
			OriginalQueue: d.Queue,
			Attempts:      dec.Attempts,
			Lang:          envelope.Lang,
		}
		// An unknown URN dead-lettered by strategy has no error; a failure carries its
		// error and type, as the other SDKs write them.
		if x.cause != nil && !(x.facts.Kind == UnknownURN && a.cfg.onUnknownURN == UnknownDeadLetter) {
			msg, typ := x.cause.Error(), exceptionName(x.cause)
			dl.Error, dl.Exception = &msg, &typ
		}
		// The dead-lettered body records the attempts made, like the dead_letter block.
		body := d.Body
		if x.env != nil && x.env.Attempts != dec.Attempts {
			var err error
			if body, err = envelope.SetAttempts(body, dec.Attempts); err != nil {
				return transport.Settlement{}, err
			}
		}
		body, err := envelope.AppendDeadLetter(body, dl)
		if err != nil {
			return transport.Settlement{}, err
		}
		return write(dlq, body, dec.Attempts, 0), nil
	case ActPoisonDeadLetter:
		dl := envelope.PoisonDeadLetter(x.cause, d.Queue, dec.Attempts, a.cfg.now().UnixMilli())
		if x.cause != nil {
			typ := exceptionName(x.cause)
			dl.Exception = &typ
		}
		return write(dlq, envelope.PoisonBody(d.Body, dl), dec.Attempts, 0), nil
	case ActPoisonRetry:
		return write(d.Queue, d.Body, dec.Attempts, dec.Delay), nil
	case ActRawDeadLetter:
		return write(dlq, d.Body, dec.Attempts, 0), nil
	case ActHandOff:
		return transport.Settlement{Outcome: transport.HandOff}, nil
	default:
		return transport.Settlement{Outcome: transport.Rewind}, nil
	}
}

// exceptionName is the dead_letter "exception" of an error: its Go type name, without
// the pointer star ("errors.errorString", "babelqueue.PanicError").
func exceptionName(err error) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", err), "*")
}

func (a *App) logOutcome(x delivery, dec Decision) {
	level := slog.LevelDebug
	switch dec.Action {
	case ActRetry, ActRelease, ActPoisonRetry, ActHandOff, ActRewind:
		level = slog.LevelInfo
	case ActDrop, ActDeadLetter, ActPoisonDeadLetter, ActRawDeadLetter:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !a.log.Enabled(ctx, level) {
		return // a handled message at the default level costs no attributes
	}
	attrs := []any{"queue", x.d.Queue, "urn", x.route, "action", dec.Action.String(), "attempts", x.facts.Attempts}
	if x.env != nil {
		attrs = append(attrs, "id", x.env.Meta.ID)
	}
	if x.cause != nil {
		attrs = append(attrs, "error", x.cause.Error())
	}
	switch dec.Action {
	case ActRetry, ActRelease, ActPoisonRetry, ActHandOff, ActRewind:
		if dec.Delay > 0 {
			attrs = append(attrs, "delay", dec.Delay)
		}
	case ActDrop:
		attrs = append(attrs, "reason", dec.Reason)
	case ActDeadLetter, ActPoisonDeadLetter, ActRawDeadLetter:
		attrs = append(attrs, "dead_letter_queue", a.deadLetterQueueOf(x.d.Queue))
		if dec.Reason != "" {
			attrs = append(attrs, "reason", dec.Reason)
		}
	}
	a.log.Log(ctx, level, "babelqueue: settled "+x.facts.Kind.String(), attrs...)
}

// deadLetterQueueOf is the dead-letter queue of a delivery's queue: the app's own,
// computed once, for the queue it consumes.
func (a *App) deadLetterQueueOf(queue string) string {
	if queue == a.cfg.queue {
		return a.dlq
	}
	return transport.DeadLetterQueue(queue, a.cfg.deadLetterQueue, a.cfg.deadLetterSuffix, a.caps)
}

// GateSchemaVersion applies the schema-version gate of SPEC §6 to the raw value of a
// delivery's bq-schema-version header. A missing (nil) value, or a string that is
// empty or only ASCII white space, passes. Otherwise only the string "1" passes, and,
// when acceptInteger is set (Service Bus), an integer 1. shown is the rejected value
// as it appears in the reserved route.
func GateSchemaVersion(v any, acceptInteger bool) (ok bool, shown string) {
	switch x := v.(type) {
	case nil:
		return true, ""
	case string:
		if x == "1" || asciiBlank(x) {
			return true, ""
		}
		return false, x
	case []byte:
		return GateSchemaVersion(string(x), acceptInteger)
	case int:
		return acceptInteger && x == 1, strconv.Itoa(x)
	case int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		n, _ := strconv.ParseInt(fmt.Sprint(x), 10, 64)
		return acceptInteger && n == 1, fmt.Sprint(x)
	case float32:
		return false, floatShown(float64(x), 32)
	case float64:
		return false, floatShown(x, 64)
	case bool:
		return false, strconv.FormatBool(x)
	default:
		return false, fmt.Sprint(x)
	}
}

func floatShown(f float64, bits int) string {
	s := strconv.FormatFloat(f, 'f', -1, bits)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}

func asciiBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			return false
		}
	}
	return true
}
