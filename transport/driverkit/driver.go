package driverkit

import (
	"context"
	"log/slog"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Driver is what a broker driver supplies for one consumer: the primitives of its
// broker, each a single broker operation. M is the driver's raw message: what its
// client hands out and what it needs to acknowledge or give back that message (a
// delivery tag and its channel, a receipt handle, a record). The kit keeps M for as
// long as the delivery is held and passes it back to Ack, GiveBack and the optional
// primitives; it never looks inside.
//
// The kit calls these methods; no method is called after Close returned, but GiveBack
// (with [Closing]) may be called while Receive calls still run.
type Driver[M any] interface {
	// Receive waits for messages of the queue and stores up to len(into) of them in
	// into, returning how many: at least one and a nil error, or none and an error.
	// len(into) is at least 1 and at most [Config.MaxBatch]. Receive returns when ctx
	// ends (with ctx.Err()) and once the consumer closes ([Consumer.Done] is closed):
	// a Receive that waits on a broker client must watch both ([Consumer.Bind] makes
	// one context of them for a client that takes a context). An error IsRetryable
	// reports is retried by the kit after a backoff; any other is returned to the
	// caller of [Consumer.Receive]. Several Receive calls run at once only with
	// [Config.ConcurrentReceive].
	Receive(ctx context.Context, into []M) (int, error)

	// Decode fills d from m: Body (never nil: an empty body is []byte{}), Key, Headers
	// (the out-of-band ones only), Redeliveries, AttemptsHeader and HasAttemptsHeader
	// (read with [Attempts] or [ParseAttempts]) and, on a binding with the schema gate,
	// SchemaVersion. The kit sets d.Queue and d.Handle. Decode cannot fail: a header it
	// cannot read is left out, and nothing in m may make it panic.
	Decode(m M, d *transport.Delivery)

	// Ack acknowledges m (deletes it, commits it, accepts it). An error leaves m
	// unacknowledged, and the runtime then rewinds it; when the broker took m back
	// already (its channel closed, its partition revoked), Ack returns a
	// [*transport.TakenBackError].
	Ack(ctx context.Context, m M) error

	// GiveBack returns ms, oldest first, to the broker, which delivers them again (a
	// nack with requeue, a visibility reset, a modified disposition); why says why.
	// A driver whose Close gives back every unacknowledged message by itself (closing
	// the channel or link) may do nothing for [Closing]. A failure is reported (from
	// Settle for [Rewound]) but frees the deliveries' slots all the same: the broker
	// redelivers them after its own timeout.
	GiveBack(ctx context.Context, ms []M, why Reason) error

	// IsRetryable reports whether a Receive error is transient (a connection or
	// channel lost, which the next Receive reopens): the kit then waits a backoff and
	// calls Receive again instead of returning the error.
	IsRetryable(err error) bool

	// Close releases the broker side of the consumer (its channel, link or
	// subscription). The kit calls it once, after it gave back what was unsettled and
	// the settlements in flight finished, or ctx ended. An error it returns is
	// reported by [Consumer.Close]; one that only says the link was gone already is
	// not worth returning.
	Close(ctx context.Context) error
}

// Writer is implemented by a driver whose settle writes and acknowledgement are
// separate broker operations: every driver but one with [Config.AtomicAcks].
type Writer[M any] interface {
	// Write hands ws, the writes of an Ack settlement of m, to the broker, in order,
	// and returns the [Confirm] that waits for the broker's confirmation of them (nil
	// when they are confirmed already). A write that cannot be handed over stops the
	// rest and is returned (a [*transport.SettleWriteError] naming its queue is best;
	// the kit wraps any other error in one): the writes before it stay made. When m is
	// lost already (its channel closed), Write returns a [*transport.TakenBackError]
	// and writes nothing. Write checks each write's size against the broker's limit
	// ([transport.CheckSize]).
	Write(ctx context.Context, m M, ws []*transport.Message) (Confirm, error)
}

// Confirm waits for the broker's confirmation of the writes a [Writer] handed over:
// nil once every one is confirmed, else the first that was refused or not confirmed
// before ctx ended.
type Confirm func(ctx context.Context) error

// AsyncWriter is implemented by a driver whose client reports the confirmation of
// writes through a callback (Kafka's delivery promises). With [Config.Pipeline] the
// kit hands a pipelined settlement's writes to WriteAsync rather than [Writer.Write],
// and waits for nothing itself: no goroutine and no timer of its own per settlement,
// which at tens of thousands of settlements a second cost more than the writes.
// Settlements that are not pipelined still use Write.
type AsyncWriter[M any] interface {
	// WriteAsync hands ws, the writes of an Ack settlement of m, to the broker as Write
	// does, and calls done exactly once: with nil once every write is confirmed, else
	// with the first failure (a [*transport.SettleWriteError] is best), within a bound
	// of the driver's (done may run on any goroutine, and before WriteAsync returns).
	// The kit then acknowledges m, or gives it back ([SettleFailed]). An error
	// WriteAsync returns means done is never called: nothing was handed over (or m was
	// taken back, a [*transport.TakenBackError]).
	WriteAsync(ctx context.Context, m M, ws []*transport.Message, done func(error)) error
}

// AtomicAcker is implemented by a driver that can make the writes of a settlement and
// the acknowledgement of its delivery one atomic step (a script, a transaction). The
// kit uses it with [Config.AtomicAcks].
type AtomicAcker[M any] interface {
	// AckWrites makes ws and the acknowledgement of m together, or none of them.
	AckWrites(ctx context.Context, m M, ws []*transport.Message) error
}

// HandOffer is implemented by a driver whose broker has a redrive of its own for the
// deliveries the runtime cannot process (SQS's RedrivePolicy, Service Bus's
// MaxDeliveryCount). The kit offers [transport.HandOff] with [Config.HandOff].
type HandOffer[M any] interface {
	// HandOff leaves m to the broker's own redrive.
	HandOff(ctx context.Context, m M) error
}

// Reason says why the kit gives a message back ([Driver.GiveBack]).
type Reason int

const (
	// Rewound: the runtime settled the delivery with [transport.Rewind] because its
	// handling failed. A broker that counts deliveries counts this one.
	Rewound Reason = iota
	// SettleFailed: an Ack of the delivery failed (a settle write refused or not
	// confirmed, a pipelined write that failed later). Its handling did not fail, so a
	// broker that counts deliveries against a limit should not count it where it can
	// (Artemis's modified without delivery-failed).
	SettleFailed
	// Closing: the consumer closes and the delivery was not settled (or was received
	// and never handed out).
	Closing
)

// String returns the reason's name.
func (r Reason) String() string {
	switch r {
	case Rewound:
		return "rewound"
	case SettleFailed:
		return "settle failed"
	case Closing:
		return "closing"
	}
	return "reason(?)"
}

// Default bounds of the kit's timings.
const (
	// DefaultConfirmTimeout bounds the wait for a pipelined settlement's confirmation,
	// and then its acknowledgement.
	DefaultConfirmTimeout = 30 * time.Second
	// DefaultPipelineDepth is the least number of pipelined settlements a consumer
	// keeps in flight (more when its prefetch is larger).
	DefaultPipelineDepth = 256
)

// Config is what a driver tells the kit about one consumer: its facts (the broker,
// what it offers, how it receives) and the consumer's own settings. The zero value of
// each field is the common case.
type Config struct {
	// Broker names the driver ("amqp") in errors and log lines. Required.
	Broker string
	// Queue is the queue consumed: each delivery's Queue, and named in log lines.
	Queue string
	// Logger receives the kit's lines (receive and settle failures, their recovery).
	// Default slog.Default().
	Logger *slog.Logger
	// Group, when not nil, holds the consumer from New until its Close, so that the
	// transport's Close closes it ([Group.Close]). New fails with
	// [transport.ErrClosed] once the group is closed.
	Group *Group

	// HandOff offers [transport.HandOff]; the driver implements [HandOffer].
	HandOff bool
	// AtomicAcks makes every Ack with writes one [AtomicAcker.AckWrites] call, and
	// [Consumer.SettlesAtomically] report true. Without it the driver implements
	// [Writer].
	AtomicAcks bool
	// Pipeline pipelines settle writes: Settle of an Ack with writes returns once
	// [Writer.Write] handed them over, and the kit acknowledges the delivery once
	// [Confirm] reports them confirmed, or gives it back ([SettleFailed]), from a
	// goroutine of its own, telling [transport.ConsumeOptions.SettleFailed] of a
	// failure ([AsyncWriter.WriteAsync] and its callback instead, when the driver has
	// it). Ignored with AtomicAcks or [transport.ConsumeOptions.Transactional].
	Pipeline bool
	// PipelineAcks pipelines the acknowledgements of Ack settlements without writes as
	// Pipeline does those with writes: Settle returns once the settlement holds a token
	// of the pipeline, and a goroutine of the kit makes the [Driver.Ack] (up to
	// Config.ConfirmTimeout); an Ack that fails gives the delivery back
	// ([SettleFailed]) and tells [transport.ConsumeOptions.SettleFailed], unless the
	// broker took it back already. For a broker whose acknowledgement waits for its
	// answer (a round trip the worker need not wait for), and a driver whose Ack groups
	// the calls made at once into one request. Ignored with
	// [transport.ConsumeOptions.Transactional].
	PipelineAcks bool
	// PipelineDepth bounds the pipelined settlements in flight; Settle waits for room.
	// Default: the prefetch or [DefaultPipelineDepth], whichever is larger.
	PipelineDepth int
	// ConfirmTimeout bounds the wait for a pipelined settlement's confirmation, and
	// then for its acknowledgement (or give-back). Default [DefaultConfirmTimeout].
	ConfirmTimeout time.Duration
	// ConcurrentReceive lets several [Driver.Receive] calls run at once (a driver that
	// reads a channel its client fills). Without it the kit makes one at a time, and
	// Receive callers that come meanwhile wait for its batch.
	ConcurrentReceive bool
	// MaxBatch is the most messages one [Driver.Receive] call may return (default 1).
	// The kit asks for one plus as many as the prefetch has room for, up to MaxBatch,
	// and hands the extra ones to the next Receive calls.
	MaxBatch int

	// MinBackoff and MaxBackoff bound the backoff after failed receives and after
	// failed settlements: it doubles from MinBackoff to MaxBackoff while failures go
	// on. Defaults [DefaultMinBackoff] and [DefaultMaxBackoff].
	MinBackoff, MaxBackoff time.Duration
}
