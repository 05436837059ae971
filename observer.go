package babelqueue

import (
	"context"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/internal/worker"
	"github.com/babelqueue-go/babelqueue/transport"
)

// An Observer is told what the runtime does: metrics, tracing, audit logs and tests
// watch the app through it. It is any value that implements one or more of
// [ReceiveHook], [HandleHook], [SettleHook], [SettleFailedHook], [PublishHook] and
// [ReceiveErrorHook]; the runtime calls only the hooks a value implements (the shape of
// franz-go's hooks). [WithObserver] refuses a value that implements none of them (a
// misspelt method name, a pointer method on a value).
//
// Hooks run synchronously on the worker that handles the delivery: keep them fast and
// never block. The values they are given are read-only and valid only during the call.
type Observer any

// ReceiveHook is told of every delivery received, before anything runs.
type ReceiveHook interface {
	OnReceive(ctx context.Context, d DeliveryInfo)
}

// HandleHook is told when a handler (with its middleware) returned.
type HandleHook interface {
	OnHandled(ctx context.Context, e HandledEvent)
}

// SettleHook is told of every settlement: the decision, the writes it made and whether
// the broker confirmed them.
type SettleHook interface {
	OnSettled(ctx context.Context, e SettledEvent)
}

// SettleFailedHook is told when the writes of a settlement fail after the settlement
// was reported to [SettleHook] as made. A transport that pipelines its settle writes
// (Kafka, RabbitMQ, Artemis and Pulsar do by default) accepts an Ack with writes once
// they are handed to the broker, and the runtime reports the settlement then; when a
// write then fails, the transport gives the delivery back (it comes again: nothing is
// lost) and this hook is told. It is called from a goroutine of the transport's and
// must not block.
type SettleFailedHook interface {
	OnSettleFailed(ctx context.Context, e SettleFailedEvent)
}

// PublishHook is told of every [App.Publish].
type PublishHook interface {
	OnPublished(ctx context.Context, e PublishedEvent)
}

// ReceiveErrorHook is told when a receive failed (the broker went away); the worker
// backs off and tries again.
type ReceiveErrorHook interface {
	OnReceiveError(ctx context.Context, e ReceiveErrorEvent)
}

// Kind is what became of a delivery before it was settled.
type Kind string

// The kinds of delivery.
const (
	KindHandled        Kind = "handled"         // the handler returned nil
	KindFailed         Kind = "failed"          // an error, a panic or a timeout
	KindUnknownURN     Kind = "unknown_urn"     // a valid envelope no handler matches
	KindPoison         Kind = "poison"          // a body that is not a usable envelope
	KindSchemaRejected Kind = "schema_rejected" // the schema-version header was rejected
	KindUnretryable    Kind = "unretryable"     // the handler returned NoRetry
	KindRequeued       Kind = "requeued"        // the handler returned Requeue
)

// Action is what the runtime did to settle a delivery.
type Action string

// The settlement actions.
const (
	ActionAck              Action = "ack"                // acknowledged: done
	ActionDrop             Action = "drop"               // acknowledged without a write, logged
	ActionRetry            Action = "retry"              // re-published with attempts+1
	ActionRelease          Action = "release"            // re-published unchanged
	ActionDeadLetter       Action = "dead_letter"        // written to the DLQ with a dead_letter block
	ActionPoisonDeadLetter Action = "poison_dead_letter" // the poison body written to the DLQ
	ActionPoisonRetry      Action = "poison_retry"       // a poison body re-published, bounded
	ActionRawDeadLetter    Action = "raw_dead_letter"    // the received bytes written to the DLQ
	ActionHandOff          Action = "handoff"            // left to the broker's own redrive
	ActionRewind           Action = "rewind"             // given back to the broker to redeliver
)

// DeliveryInfo describes a delivery to hooks.
type DeliveryInfo struct {
	// Queue is the queue it came from.
	Queue string
	// URN is the envelope's URN, the reserved route of a schema-version rejection, or
	// "" for poison.
	URN string
	// ID, TraceID, Lang and CreatedAt (Unix ms) are the envelope's; empty or zero for
	// poison and rejections.
	ID        string
	TraceID   string
	Lang      string
	CreatedAt int64
	// Attempts is the reconciled attempts counter.
	Attempts int
	// BodySize is the body's length in bytes.
	BodySize int
	// Poison reports a body that is not a usable envelope; Rejected one the
	// schema-version gate rejected.
	Poison   bool
	Rejected bool
	// Headers are the out-of-band headers (read-only).
	Headers map[string]string
}

// HandledEvent is given to [HandleHook].
type HandledEvent struct {
	Delivery DeliveryInfo
	// Start is when the handler started.
	Start time.Time
	// Duration is how long the handler ran.
	Duration time.Duration
	// Err is what it returned (nil on success).
	Err error
}

// Write is one write a settlement made (a retry, a release, a dead-letter write).
type Write struct {
	Queue string
	Delay time.Duration
}

// SettledEvent is given to [SettleHook].
type SettledEvent struct {
	Delivery DeliveryInfo
	// Kind is what became of the delivery; Action what was decided; Reason the
	// dead_letter reason ("failed", "unknown_urn", "poison") or why it was dropped.
	Kind   Kind
	Action Action
	Reason string
	// Attempts is the counter the settlement wrote or recorded.
	Attempts int
	// Cause is the handler's error, the poison verdict or the rejection (nil when
	// handled).
	Cause error
	// Writes are the writes made before the acknowledgement.
	Writes []Write
	// Err is nil when the broker confirmed the settlement. Otherwise the writes were
	// not confirmed (or the acknowledgement failed) and the delivery was rewound so the
	// broker redelivers it: nothing is lost.
	Err error
	// Duration is how long the settlement took: from the handler's return when a
	// handler ran (the clock is read once there for both events), else from when the
	// settlement started.
	Duration time.Duration
}

// SettleFailedEvent is given to [SettleFailedHook].
type SettleFailedEvent struct {
	// Delivery is the delivery whose settlement failed, read again from its body.
	Delivery DeliveryInfo
	// Kind is what the delivery is as far as its body tells: handled (its URN has a
	// handler), unknown_urn, poison or schema_rejected; the handler's outcome is not
	// kept for a settlement that may fail later.
	Kind Kind
	// Writes are the writes the settlement made (some may have been written: the
	// redelivery repeats them, a duplicate at worst).
	Writes []Write
	// Err is why the writes were not confirmed.
	Err error
}

// PublishedEvent is given to [PublishHook].
type PublishedEvent struct {
	Queue    string
	URN      string
	ID       string
	TraceID  string
	BodySize int
	// Err is nil when the transport accepted the message.
	Err error
	// Duration is how long the transport took.
	Duration time.Duration
}

// ReceiveErrorEvent is given to [ReceiveErrorHook].
type ReceiveErrorEvent struct {
	Queue string
	Err   error
	// Backoff is how long the worker waits before it receives again.
	Backoff time.Duration
}

// WithObserver adds observers; each is told through the hook interfaces it implements.
// A nil observer, or one that implements none of the hook interfaces, is an
// [ErrInvalidOption].
func WithObserver(obs ...Observer) Option {
	return func(c *config) {
		for _, o := range obs {
			if o == nil {
				c.invalid("observer is nil")
				return
			}
			if !isObserver(o) {
				c.invalid("observer %T implements none of the hooks (ReceiveHook, HandleHook, SettleHook, SettleFailedHook, PublishHook, ReceiveErrorHook)", o)
				return
			}
		}
		c.observers = append(c.observers, obs...)
	}
}

// isObserver reports whether o implements at least one hook.
func isObserver(o Observer) bool {
	switch o.(type) {
	case ReceiveHook, HandleHook, SettleHook, SettleFailedHook, PublishHook, ReceiveErrorHook:
		return true
	default:
		return false
	}
}

// hooks holds the observers by the hooks they implement, so the hot path pays one
// length check for a hook nobody implements.
type hooks struct {
	receive      []ReceiveHook
	handled      []HandleHook
	settled      []SettleHook
	published    []PublishHook
	receiveError []ReceiveErrorHook
	settleFailed []SettleFailedHook
}

func newHooks(obs []Observer) hooks {
	var h hooks
	for _, o := range obs {
		if x, ok := o.(ReceiveHook); ok {
			h.receive = append(h.receive, x)
		}
		if x, ok := o.(HandleHook); ok {
			h.handled = append(h.handled, x)
		}
		if x, ok := o.(SettleHook); ok {
			h.settled = append(h.settled, x)
		}
		if x, ok := o.(PublishHook); ok {
			h.published = append(h.published, x)
		}
		if x, ok := o.(ReceiveErrorHook); ok {
			h.receiveError = append(h.receiveError, x)
		}
		if x, ok := o.(SettleFailedHook); ok {
			h.settleFailed = append(h.settleFailed, x)
		}
	}
	return h
}

// observing says which hooks the workers tell.
func (h *hooks) observing() worker.Observing {
	return worker.Observing{
		Receive:      len(h.receive) > 0,
		Handle:       len(h.handled) > 0,
		Settle:       len(h.settled) > 0,
		ReceiveError: len(h.receiveError) > 0,
		SettleFailed: len(h.settleFailed) > 0,
	}
}

// deliveryInfo describes a delivery, as a worker read it, to hooks.
func deliveryInfo(d worker.Delivery) DeliveryInfo {
	di := DeliveryInfo{
		Queue: d.D.Queue, URN: d.Route, Attempts: d.Facts.Attempts, BodySize: len(d.D.Body),
		Poison: d.Facts.Kind == settle.Poison, Rejected: d.Facts.Kind == settle.SchemaRejected,
		Headers: d.D.Headers,
	}
	if d.Env != nil {
		di.ID, di.TraceID, di.Lang, di.CreatedAt = d.Env.Meta.ID, d.Env.TraceID, d.Env.Meta.Lang, d.Env.Meta.CreatedAt
	}
	return di
}

// writesOf lists a settlement's writes for an event.
func writesOf(ws []*transport.Message) []Write {
	var out []Write
	for _, w := range ws {
		out = append(out, Write{Queue: w.Queue, Delay: w.Delay})
	}
	return out
}

// The methods below are the hooks as the workers (internal/worker) tell them: each
// makes the public event and tells the observers that implement its hook.

// Received tells the ReceiveHook observers.
func (h *hooks) Received(ctx context.Context, d worker.Delivery) {
	di := deliveryInfo(d)
	for _, o := range h.receive {
		o.OnReceive(ctx, di)
	}
}

// Handled tells the HandleHook observers.
func (h *hooks) Handled(ctx context.Context, d worker.Delivery, start time.Time, took time.Duration, err error) {
	ev := HandledEvent{Delivery: deliveryInfo(d), Start: start, Duration: took, Err: err}
	for _, o := range h.handled {
		o.OnHandled(ctx, ev)
	}
}

// Settled tells the SettleHook observers.
func (h *hooks) Settled(ctx context.Context, s worker.Settled) {
	ev := SettledEvent{
		Delivery: deliveryInfo(s.Delivery), Kind: Kind(s.Delivery.Facts.Kind.String()), Action: Action(s.Decision.Action.String()),
		Reason: s.Decision.Reason, Attempts: s.Decision.Attempts, Cause: s.Delivery.Cause, Writes: writesOf(s.Writes),
		Err: s.Err, Duration: s.Took,
	}
	for _, o := range h.settled {
		o.OnSettled(ctx, ev)
	}
}

// ReceiveFailed tells the ReceiveErrorHook observers.
func (h *hooks) ReceiveFailed(ctx context.Context, queue string, err error, backoff time.Duration) {
	ev := ReceiveErrorEvent{Queue: queue, Err: err, Backoff: backoff}
	for _, o := range h.receiveError {
		o.OnReceiveError(ctx, ev)
	}
}

// SettleFailed tells the SettleFailedHook observers.
func (h *hooks) SettleFailed(ctx context.Context, d worker.Delivery, writes []*transport.Message, err error) {
	ev := SettleFailedEvent{Delivery: deliveryInfo(d), Kind: Kind(d.Facts.Kind.String()), Writes: writesOf(writes), Err: err}
	for _, o := range h.settleFailed {
		o.OnSettleFailed(ctx, ev)
	}
}
