package transport

import (
	"errors"
	"fmt"
)

// More errors shared by every transport (see also [ErrClosed], [ErrSettleWrite],
// [ErrAlreadySettled] and [ErrUnsupported]).
var (
	// ErrTakenBack matches a Settle of a delivery the broker had already taken back
	// before it was settled: a Kafka partition revoked, an AMQP channel or an Artemis
	// link gone, a Redis reservation lapsed. The broker delivers the message again;
	// nothing was written. Every error matching ErrTakenBack also matches
	// [ErrAlreadySettled], so the runtime does not try to rewind it.
	ErrTakenBack = errors.New("transport: delivery taken back by the broker")

	// ErrTooLarge matches a message longer than the broker accepts. The typed form is
	// [TooLargeError]; a settle write refused for its size also matches [ErrSettleWrite].
	ErrTooLarge = errors.New("transport: message too large for the broker")

	// ErrBadSettlement matches a [Settlement] no consumer accepts: writes with an
	// outcome other than Ack, or a nil write or one without a queue.
	ErrBadSettlement = errors.New("transport: bad settlement")

	// ErrInvalidOption matches every error about an option value: the runtime's
	// options (babelqueue.ErrInvalidOption is this error) and a driver's, given in code
	// or in its URL. A driver's names the option (driverkit.OptionError).
	ErrInvalidOption = errors.New("babelqueue: invalid option")
)

// TakenBackError is the typed form of [ErrTakenBack]. It unwraps to the driver's own
// error (such as redis.ErrReservationLost) or the broker's.
type TakenBackError struct {
	Broker string // the driver: "redis", "amqp", …
	Queue  string // the queue the delivery came from
	Reason string // what took it back: "the reservation lapsed", "the channel closed"
	Err    error  // the driver's sentinel or the broker's error; may be nil
}

// Error describes what took the delivery back.
func (e *TakenBackError) Error() string {
	msg := fmt.Sprintf("%s: delivery from %q taken back by the broker before it was settled (%s); it is delivered again", e.Broker, e.Queue, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes the error match [ErrTakenBack] and [ErrAlreadySettled].
func (e *TakenBackError) Is(target error) bool {
	return target == ErrTakenBack || target == ErrAlreadySettled
}

// Unwrap returns the driver's or the broker's error.
func (e *TakenBackError) Unwrap() error { return e.Err }

// TooLargeError is the typed form of [ErrTooLarge]: it names the broker, the queue, the
// size of the message and the broker's limit, in bytes.
type TooLargeError struct {
	Broker string
	Queue  string
	Size   int
	Limit  int
}

// Error describes the message and the limit.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: message for %q is %d bytes, over the broker's limit of %d bytes", e.Broker, e.Queue, e.Size, e.Limit)
}

// Is makes the error match [ErrTooLarge].
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// CheckSize returns a [*TooLargeError] when size is over limit, else nil. A limit of
// zero or less is no limit. Drivers call it before every publish and settle write with
// the size the broker counts (the body, or the element or frame it stores) and the
// broker's own limit, so an oversized message fails with the limit in the error instead
// of a broker-specific disconnect.
func CheckSize(broker, queue string, size, limit int) error {
	if limit > 0 && size > limit {
		return &TooLargeError{Broker: broker, Queue: queue, Size: size, Limit: limit}
	}
	return nil
}
