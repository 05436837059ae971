// Package transport is the contract between the BabelQueue runtime and a broker.
//
// A broker driver lives in its own package (transport/redis, transport/amqp, …),
// implements [Transport] and registers its URL schemes with [Register] from an init
// function, so a program links only the brokers it imports. The runtime never talks to a
// broker in any other way.
//
// # The shape of the contract
//
// A [Transport] publishes [Message] values and opens a [Consumer] per queue. A consumer
// hands out [Delivery] values: the raw body bytes exactly as the broker stored them, the
// record key, out-of-band headers, the native delivery count, the attempts header and the
// schema-version header. The runtime decides what to do with each delivery (see the root
// package) and tells the consumer in one call, [Consumer.Settle], with a [Settlement]:
//
//   - Ack: the delivery is done. Any [Settlement.Writes] (a retry re-publish, a release, a
//     dead-letter write) are made first and must be confirmed by the broker before the
//     delivery is acknowledged. When a write fails or times out, the consumer must not
//     acknowledge anything and returns an error matching [ErrSettleWrite]; the runtime then
//     settles the same delivery again with Rewind. Nothing is ever lost because a write
//     failed. Where the broker allows it (a Redis script, the memory broker) the writes
//     and the acknowledgement are one atomic step and a failure makes none of them.
//     Elsewhere the writes are made in order and the first that fails stops them: the
//     writes after it are not made, the ones before it stay made (the broker cannot take
//     them back), and the redelivery makes them again, so a consumer of a retry or
//     dead-letter queue sees them at least once.
//   - Rewind: give the delivery back so the broker redelivers it, with a higher native
//     delivery count where the broker keeps one.
//   - HandOff: leave the delivery to the broker's own redrive (SQS: left undeleted so the
//     queue's RedrivePolicy takes it; Service Bus: abandoned until MaxDeliveryCount). Only
//     transports whose [Capabilities.HandOff] is true receive it.
//
// The capabilities a transport reports ([Capabilities]) let the one pure settlement
// decision of the runtime apply the per-broker rules of the specification without
// knowing which broker it is talking to.
//
// # Bytes
//
// A transport never re-encodes a body: what the runtime hands to Publish is what the
// broker stores, and what the broker stores is what [Delivery.Body] holds. Keys are
// byte-exact too: a nil key is "no key", a non-nil empty key is an empty key, and a write
// that settles a delivery carries the delivery's key unchanged.
package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
)

// Transport is a connection to one broker.
//
// Implementations are safe for concurrent use.
type Transport interface {
	// Publish writes one message. It is the user's own publish: a transport may return
	// before the broker confirmed it (Kafka) where its documentation says so. Settle
	// writes never go through Publish.
	Publish(ctx context.Context, m *Message) error

	// Consume opens a consumer on one queue. The consumer receives at most
	// opts.Prefetch unsettled deliveries at a time.
	Consume(ctx context.Context, queue string, opts ConsumeOptions) (Consumer, error)

	// Capabilities tells the runtime what this broker binding can do.
	Capabilities() Capabilities

	// Close flushes pending publishes and releases the connection. Deliveries not yet
	// settled are left to the broker to redeliver.
	Close(ctx context.Context) error
}

// ConsumeOptions tunes a [Consumer].
type ConsumeOptions struct {
	// Prefetch bounds the deliveries handed out and not yet settled; it matches the
	// runtime's concurrency. Zero means 1.
	Prefetch int
	// SettleQueues are the queues besides the consumed one that the runtime's settle
	// writes for this consumer may go to (its dead-letter queue). A transport whose
	// queues must exist before they are written to (Kafka topics) checks or creates
	// them in Consume, so that one it cannot have is an error at start instead of a
	// failed write per message. Empty when there are none.
	SettleQueues []string
	// SettleDelays are the delays the runtime's retries may carry (its retry tiers).
	// A transport that parks delayed messages on a queue per delay (Kafka) checks or
	// creates those queues in Consume too.
	SettleDelays []time.Duration
	// Transactional asks for a consumer whose Ack settlements make their writes and
	// the acknowledgement in one broker transaction, where the broker offers one
	// (RabbitMQ tx channels, Kafka and Pulsar transactions): a process killed between
	// them leaves neither. Each settlement then costs a commit, so this is for tools
	// that move messages between queues (a DLQ redrive), not for the runtime. A
	// transport that cannot still settles each Ack before Settle returns (no pipelined
	// settle writes), so a kill leaves at most the delivery in hand in both queues;
	// [SettlesAtomically] tells which the consumer does.
	Transactional bool
	// SettleFailed, when not nil, is called by a consumer that pipelines its settle
	// writes (Settle of an Ack with writes returns once they are handed to the broker)
	// when those writes fail afterwards: d and s are what Settle was given; the consumer
	// has given the delivery back and the broker delivers it again, so nothing is lost,
	// but the settlement Settle accepted did not happen. It is called once per such
	// failure, from a goroutine of the consumer's, and must not block. The runtime
	// reports it to its observers ([babelqueue.SettleFailedHook]).
	SettleFailed func(d *Delivery, s Settlement, err error)
}

// Consumer receives deliveries from one queue.
//
// Receive and Settle are safe for concurrent use by several workers.
type Consumer interface {
	// Receive blocks until a delivery is available or ctx ends. It returns ctx.Err()
	// when ctx ends and [ErrClosed] after Close.
	Receive(ctx context.Context) (*Delivery, error)

	// Settle finishes a delivery (see the package documentation). Settling a delivery
	// twice is an error matching [ErrAlreadySettled], and so is settling one the broker
	// took back ([ErrTakenBack]) or one Close gave back (which also matches [ErrClosed]).
	// An outcome the transport does not offer matches [ErrUnsupported], a malformed
	// settlement [ErrBadSettlement]. A delivery holds a prefetch slot until it is settled;
	// a Rewind or HandOff that fails still frees it (the broker redelivers the message
	// after its own timeout), an Ack that fails keeps it for the Rewind that follows.
	Settle(ctx context.Context, d *Delivery, s Settlement) error

	// Close stops receiving. Deliveries handed out and not settled are given back to
	// the broker (rewound) or left for it to redeliver.
	Close(ctx context.Context) error
}

// Message is one write to a broker.
type Message struct {
	// Queue is the logical queue (topic, list, address) to write to.
	Queue string
	// Body is the envelope bytes, written unchanged.
	Body []byte
	// Key is the record key where the broker has one (Kafka, Pulsar, SQS FIFO group). A nil
	// Key is no key; a non-nil empty Key is an empty key.
	Key []byte
	// Headers are out-of-band string headers. They never replace a projected field.
	Headers map[string]string
	// Attempts is the retry counter to project onto the broker's attempts header where
	// the binding has one (x-attempts, bq-attempts, bq_attempts). For a poison body the
	// header is the only place the count can ride.
	Attempts int
	// Delay asks the broker to deliver the message no sooner than this. Zero is now.
	Delay time.Duration
	// Projection holds the envelope fields a binding projects onto native properties.
	// It is the zero value for a raw write (a poison dead-letter body, a body rejected
	// by the schema-version gate), where only what is known is projected.
	Projection Projection
	// Owned says the caller hands Body and Key over with the message: nothing changes
	// their bytes once Publish is called, so a transport that writes after Publish
	// returns (Kafka's fire-and-forget publish) may keep them instead of copying them.
	// The runtime sets it on the messages it encodes; leave it false for a buffer you
	// reuse.
	Owned bool
}

// Projection is the view of an envelope a binding copies into native message properties.
type Projection struct {
	URN           string // job
	TraceID       string // trace_id
	MessageID     string // meta.id
	Lang          string // meta.lang
	SchemaVersion int    // meta.schema_version; zero when unknown
	CreatedAt     int64  // meta.created_at, Unix ms; zero when unknown
}

// ProjectionOf returns the projection of e, exactly as the runtime hands it to a
// transport with every write: a tool that publishes an envelope it did not build (a
// bridge, a redrive) projects it with this so its headers match the runtime's.
func ProjectionOf(e *envelope.Envelope) Projection {
	return Projection{
		URN:           e.Job,
		TraceID:       e.TraceID,
		MessageID:     e.Meta.ID,
		Lang:          e.Meta.Lang,
		SchemaVersion: e.Meta.SchemaVersion,
		CreatedAt:     e.Meta.CreatedAt,
	}
}

// Delivery is one received message.
type Delivery struct {
	// Queue is the queue the delivery came from.
	Queue string
	// Body is the message body exactly as the broker returned it.
	Body []byte
	// Key is the record key; nil when the record has none.
	Key []byte
	// Headers are the out-of-band string headers that were published with the message,
	// without the binding's own projected fields.
	Headers map[string]string
	// Redeliveries is the broker's native redelivery count, normalised to "deliveries
	// before this one" (SQS ApproximateReceiveCount−1, Service Bus DeliveryCount−1,
	// Pulsar RedeliveryCount, Artemis delivery-count). Zero where the broker keeps none.
	Redeliveries int
	// AttemptsHeader is the value of the binding's attempts header, when
	// HasAttemptsHeader is true.
	AttemptsHeader int
	// HasAttemptsHeader reports whether the attempts header was present and readable.
	HasAttemptsHeader bool
	// SchemaVersion is the raw value of the schema-version header (bq-schema-version,
	// bq_schema_version) on the bindings that gate on it: nil when missing or null,
	// otherwise a string, an int64, a float64 or a bool as the broker typed it.
	SchemaVersion any

	// Handle is the transport's own bookkeeping for this delivery (a receipt handle,
	// an offset, a delivery tag). The runtime never looks at it.
	Handle any
}

// Outcome is the final state a [Settlement] puts a delivery in.
type Outcome int

const (
	// Ack acknowledges (deletes, commits) the delivery after its writes are confirmed.
	Ack Outcome = iota
	// Rewind gives the delivery back so the broker redelivers it.
	Rewind
	// HandOff leaves the delivery to the broker's own redrive mechanism.
	HandOff
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Ack:
		return "ack"
	case Rewind:
		return "rewind"
	case HandOff:
		return "handoff"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// Settlement tells a consumer how to finish a delivery.
type Settlement struct {
	// Outcome is what happens to the delivery itself.
	Outcome Outcome
	// Writes are made and confirmed before an Ack. They are only allowed with Ack.
	Writes []*Message
}

// AttemptsRule says how a binding reconciles the attempts counter of a delivery.
type AttemptsRule int

const (
	// AttemptsFromBody uses the body's attempts (Redis, RabbitMQ, memory). A body that
	// cannot be read falls back to the attempts header.
	AttemptsFromBody AttemptsRule = iota
	// AttemptsMaxNative uses the larger of the body's attempts (or, for an unreadable
	// body, the attempts header) and the native redelivery count (SQS, Service Bus,
	// Pulsar, Artemis).
	AttemptsMaxNative
	// AttemptsHeaderAuthoritative uses the attempts header when present, even when it
	// is lower than the body's, else the body (Kafka).
	AttemptsHeaderAuthoritative
)

// Capabilities describes a broker binding to the runtime.
type Capabilities struct {
	// Attempts is how the binding reconciles the attempts counter.
	Attempts AttemptsRule
	// Delay reports that [Message.Delay] is honoured. Without it retry tiers are
	// applied as immediate re-publishes, and a message published with a Delay is sent
	// at once (never refused, never lost).
	Delay bool
	// MaxDelay is the longest delay the broker accepts (zero: no limit). Longer tiers
	// are clamped to it.
	MaxDelay time.Duration
	// HandOff reports that the broker has its own redrive for deliveries the runtime
	// cannot process (SQS RedrivePolicy, Service Bus MaxDeliveryCount): poison and
	// schema-gate rejections with the runtime's DLQ off are handed to it.
	HandOff bool
	// PoisonAlwaysDeadLetter makes poison go to the DLQ whatever the options (Redis).
	PoisonAlwaysDeadLetter bool
	// PoisonNeedsRetryTiers makes poison with the DLQ off and no retry tiers be
	// acknowledged, dropped and logged instead of re-published (Kafka).
	PoisonNeedsRetryTiers bool
	// SchemaGate reports that deliveries carry the schema-version header in
	// [Delivery.SchemaVersion] and that the gate applies (SQS, Service Bus, Kafka,
	// Artemis).
	SchemaGate bool
	// SchemaGateAcceptsInteger accepts the integer 1 as well as the string "1"
	// (Service Bus).
	SchemaGateAcceptsInteger bool
	// DeadLetterSuffix is the default DLQ suffix: ".dlq", or "-dlq" on SQS. Empty
	// means ".dlq".
	DeadLetterSuffix string
	// FIFOSuffix is a queue-name suffix the DLQ suffix goes before (".fifo" on SQS).
	FIFOSuffix string
	// PublishConfirmed reports that [Transport.Publish] returns only once the broker
	// confirmed the message, so [PublishConfirmed] may fall back to it, one message at a
	// time, for a transport that is not a [ConfirmedPublisher].
	PublishConfirmed bool
}

// Errors shared by every transport.
var (
	// ErrClosed is returned by operations on a closed transport or consumer.
	ErrClosed = errors.New("transport: closed")
	// ErrSettleWrite matches every failure of a write made to settle a delivery; the
	// delivery was not acknowledged.
	ErrSettleWrite = errors.New("transport: settle write not confirmed")
	// ErrAlreadySettled is returned when a delivery is settled twice.
	ErrAlreadySettled = errors.New("transport: delivery already settled")
	// ErrUnsupported is returned for an outcome the transport does not offer.
	ErrUnsupported = errors.New("transport: unsupported")
)

// SettleWriteError is the typed form of [ErrSettleWrite]: it names the queue the write
// went to and wraps the broker's error.
type SettleWriteError struct {
	Queue string
	Err   error
}

// Error describes the failed write.
func (e *SettleWriteError) Error() string {
	return fmt.Sprintf("transport: settle write to %q not confirmed: %v", e.Queue, e.Err)
}

// Unwrap returns the broker's error.
func (e *SettleWriteError) Unwrap() error { return e.Err }

// Is makes the error match [ErrSettleWrite].
func (e *SettleWriteError) Is(target error) bool { return target == ErrSettleWrite }
