package worker

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// settle carries out a delivery's route (settle.Decide): it builds the step's
// settlement and hands it to the consumer. A step whose write cannot be built, or that
// the broker refused for its size, gives way to the step the route names for that
// setback; a settlement that fails otherwise is rewound, so the broker delivers the
// message again: nothing is lost. start is when the settlement began for the settle
// hooks' Duration (the handler's end, already read for the handle hooks); zero reads
// the clock here when a settle hook wants it.
func (w *worker[M]) settle(sctx context.Context, x delivery[M], route *settle.Route, start time.Time) {
	p := w.p
	log := p.cfg.Log
	if p.obs.Settle && start.IsZero() {
		start = time.Now()
	}
	for i := 0; ; {
		dec := route.Step(i)
		s, err := p.settlement(&x, dec)
		if err != nil {
			next, ok := route.Next(i, settle.Unbuildable)
			if !ok { // not reached: every step that writes has a step after it for this
				s, dec = transport.Settlement{Outcome: transport.Rewind}, settle.Decision{Action: settle.ActRewind}
			} else {
				log.Error("babelqueue: cannot build the settle write; routing the delivery as received instead",
					"queue", x.D.Queue, "urn", x.Route, "action", dec.Action.String(), "instead", route.Step(next).Action.String(), "error", err)
				i = next
				continue
			}
		}
		err = w.c.Settle(sctx, x.D, s)
		if p.obs.Settle {
			w.tellSettled(sctx, &x, dec, s, err, start)
		}
		if err == nil {
			p.logOutcome(&x, dec)
			return
		}
		if errors.Is(err, transport.ErrAlreadySettled) {
			log.Warn("babelqueue: delivery was already settled (the broker took it back)", "queue", x.D.Queue, "urn", x.Route, "error", err)
			return
		}
		if errors.Is(err, transport.ErrTooLarge) {
			if next, ok := route.Next(i, settle.TooLarge); ok {
				log.Error("babelqueue: the broker refused the settle write for its size; routing the delivery as received instead of rewinding it",
					"queue", x.D.Queue, "urn", x.Route, "action", dec.Action.String(), "instead", route.Step(next).Action.String(), "error", err)
				i = next
				if p.obs.Settle {
					start = time.Now()
				}
				continue
			}
		}
		log.Error("babelqueue: settlement failed; rewinding so the broker redelivers",
			"queue", x.D.Queue, "urn", x.Route, "action", dec.Action.String(), "error", err)
		if s.Outcome == transport.Rewind {
			return
		}
		if rerr := w.c.Settle(sctx, x.D, transport.Settlement{Outcome: transport.Rewind}); rerr != nil && !errors.Is(rerr, transport.ErrAlreadySettled) {
			log.Error("babelqueue: rewind failed; the broker will redeliver after its own timeout",
				"queue", x.D.Queue, "urn", x.Route, "error", rerr)
		}
		return
	}
}

// tellSettled tells the settle hooks, under the delivery's settle hook context.
func (w *worker[M]) tellSettled(ctx context.Context, x *delivery[M], dec settle.Decision, s transport.Settlement, err error, start time.Time) {
	w.p.hooks.Settled(x.hookContext(hookSettle, ctx), Settled{
		Delivery: x.Delivery, Decision: dec, Writes: s.Writes, Err: err, Took: time.Since(start),
	})
}

// settleWrite is a settlement's one write and the slice that holds it, in one
// allocation.
type settleWrite struct {
	msg    transport.Message
	writes [1]*transport.Message
}

// settlement is the consumer's settlement of a step: the outcome and the writes it
// makes (a retry, a release or a dead letter writes one message). It fails only when a
// body cannot be edited (settle.Unbuildable).
func (p *Pool[M]) settlement(x *delivery[M], dec settle.Decision) (transport.Settlement, error) {
	d := x.D
	write := func(queue string, body []byte, attempts int, delay time.Duration) transport.Settlement {
		w := &settleWrite{msg: transport.Message{Queue: queue, Body: body, Key: d.Key, Headers: d.Headers, Attempts: attempts, Delay: delay}}
		if x.Env != nil {
			w.msg.Projection = transport.ProjectionOf(x.Env)
		}
		w.writes[0] = &w.msg
		return transport.Settlement{Outcome: transport.Ack, Writes: w.writes[:]}
	}
	switch dec.Action {
	case settle.ActAck, settle.ActDrop:
		return transport.Settlement{Outcome: transport.Ack}, nil
	case settle.ActRetry:
		var body []byte
		var err error
		if x.Env != nil { // its envelope was decoded from d.Body
			body, err = x.Env.RetryBody(dec.Attempts)
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
			FailedAt:      p.cfg.Now().UnixMilli(),
			OriginalQueue: d.Queue,
			Attempts:      dec.Attempts,
			Lang:          envelope.Lang,
		}
		// A delivery dead-lettered untried (an unknown URN, by strategy) has no error;
		// a failure carries its error and type, as the other SDKs write them.
		if x.Cause != nil && !dec.Untried {
			msg, typ := x.Cause.Error(), exceptionName(x.Cause)
			dl.Error, dl.Exception = &msg, &typ
		}
		// The dead-lettered body records the attempts made, like the dead_letter block
		// (DeadLetterBody); one dead-lettered untried made no attempt and only appends
		// the block.
		var body []byte
		var err error
		if x.Env != nil && !dec.Untried {
			body, err = x.Env.DeadLetterBody(dl)
		} else {
			body, err = envelope.AppendDeadLetter(d.Body, dl)
		}
		if err != nil {
			return transport.Settlement{}, err
		}
		return write(p.deadLetterQueueOf(d.Queue), body, dec.Attempts, 0), nil
	case settle.ActPoisonDeadLetter:
		dl := envelope.PoisonDeadLetter(x.Cause, d.Queue, dec.Attempts, p.cfg.Now().UnixMilli())
		if x.Cause != nil {
			typ := exceptionName(x.Cause)
			dl.Exception = &typ
		}
		return write(p.deadLetterQueueOf(d.Queue), envelope.PoisonBody(d.Body, dl), dec.Attempts, 0), nil
	case settle.ActPoisonRetry:
		return write(d.Queue, d.Body, dec.Attempts, dec.Delay), nil
	case settle.ActRawDeadLetter:
		return write(p.deadLetterQueueOf(d.Queue), d.Body, dec.Attempts, 0), nil
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
func (p *Pool[M]) logOutcome(x *delivery[M], dec settle.Decision) {
	level := slog.LevelDebug
	switch dec.Action {
	case settle.ActPoisonRetry, settle.ActHandOff, settle.ActRewind:
		level = slog.LevelInfo
	case settle.ActDrop, settle.ActDeadLetter, settle.ActPoisonDeadLetter, settle.ActRawDeadLetter:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	log := p.cfg.Log
	if !log.Enabled(ctx, level) {
		return // a handled message at the default level costs no attributes
	}
	// slog.Attr values and a message per kind: the line is the same, without a boxed
	// value or a concatenation per attribute.
	var buf [9]slog.Attr
	attrs := append(buf[:0], slog.String("queue", x.D.Queue), slog.String("urn", x.Route),
		slog.String("action", dec.Action.String()), slog.Int("attempts", x.Facts.Attempts))
	if x.Env != nil {
		attrs = append(attrs, slog.String("id", x.Env.Meta.ID))
	}
	if x.Cause != nil {
		attrs = append(attrs, slog.String("error", x.Cause.Error()))
	}
	switch dec.Action {
	case settle.ActRetry, settle.ActRelease, settle.ActPoisonRetry, settle.ActHandOff, settle.ActRewind:
		if dec.Delay > 0 {
			attrs = append(attrs, slog.Duration("delay", dec.Delay))
		}
	case settle.ActDrop:
		attrs = append(attrs, slog.String("reason", dec.Reason))
	case settle.ActDeadLetter, settle.ActPoisonDeadLetter, settle.ActRawDeadLetter:
		attrs = append(attrs, slog.String("dead_letter_queue", p.deadLetterQueueOf(x.D.Queue)))
		if dec.Reason != "" {
			attrs = append(attrs, slog.String("reason", dec.Reason))
		}
	}
	log.LogAttrs(ctx, level, settledMessage(x.Facts.Kind), attrs...)
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
func (p *Pool[M]) deadLetterQueueOf(queue string) string {
	if queue == p.cfg.Queue {
		return p.cfg.DeadLetterQueue
	}
	return settle.DeadLetterQueue(queue, p.cfg.DeadLetterOverride, p.cfg.DeadLetterSuffix, p.cfg.Caps)
}
