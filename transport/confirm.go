package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ConfirmedPublisher is implemented by transports that can write a batch of messages
// and wait until the broker confirmed every one of them: a Kafka produce awaited for
// its acknowledgement, a RabbitMQ publisher confirm, a Redis reply. The transactional
// outbox relay publishes through it, so that a row is marked published only once the
// broker holds its message.
type ConfirmedPublisher interface {
	// PublishConfirmed writes msgs in order and returns nil once the broker confirmed
	// every one. When some were not confirmed (refused, timed out, not sent because the
	// connection was lost) it returns a *[BatchError] that says which: the others
	// were confirmed. Any other error means none of them was.
	PublishConfirmed(ctx context.Context, msgs []*Message) error
}

// ErrNotConfirmed matches every [BatchError]: at least one message of a batch was not
// confirmed by the broker.
var ErrNotConfirmed = errors.New("transport: publish not confirmed")

// BatchError says which messages of a [ConfirmedPublisher.PublishConfirmed] batch were
// not confirmed. It matches [ErrNotConfirmed] and, through Unwrap, each message's error.
type BatchError struct {
	// Errs has one entry per message of the batch, in order: nil for a message the
	// broker confirmed, the cause for one it did not.
	Errs []error
}

// NewBatchError returns a *BatchError for errs (one entry per message, nil when
// confirmed), or nil when every entry is nil.
func NewBatchError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}

// Failed returns the indexes of the messages that were not confirmed, in order.
func (e *BatchError) Failed() []int {
	var idx []int
	for i, err := range e.Errs {
		if err != nil {
			idx = append(idx, i)
		}
	}
	return idx
}

// Error says how many messages were not confirmed and why the first one was not.
func (e *BatchError) Error() string {
	failed := e.Failed()
	if len(failed) == 0 {
		return "transport: every message of the batch was confirmed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "transport: %d of %d messages not confirmed (index %d: %v", len(failed), len(e.Errs), failed[0], e.Errs[failed[0]])
	if len(failed) > 1 {
		fmt.Fprintf(&b, "; and %d more", len(failed)-1)
	}
	b.WriteByte(')')
	return b.String()
}

// Unwrap returns the errors of the messages that were not confirmed.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Is makes the error match [ErrNotConfirmed].
func (e *BatchError) Is(target error) bool { return target == ErrNotConfirmed }

// ErrNotAttempted is the cause recorded in a [BatchError] for a message that was not
// sent at all because an earlier message of the batch failed (the one-by-one fallback
// of [PublishConfirmed] stops at the first failure, so the order of a batch is kept).
var ErrNotAttempted = errors.New("transport: not sent after an earlier message of the batch failed")

// PublishConfirmed writes msgs and returns once the broker confirmed every one, with the
// same results as [ConfirmedPublisher.PublishConfirmed]. It uses the transport's own
// PublishConfirmed when it has one. Otherwise, when [Capabilities.PublishConfirmed]
// says the transport's Publish waits for the broker, it publishes the messages one by
// one, stopping at the first failure (the rest are reported with [ErrNotAttempted]).
// A transport that can do neither gets an error matching [ErrUnsupported] and nothing is
// sent.
func PublishConfirmed(ctx context.Context, tr Transport, msgs []*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if cp, ok := tr.(ConfirmedPublisher); ok {
		return cp.PublishConfirmed(ctx, msgs)
	}
	if !tr.Capabilities().PublishConfirmed {
		return fmt.Errorf("%w: %T neither confirms its publishes nor implements ConfirmedPublisher", ErrUnsupported, tr)
	}
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if err := tr.Publish(ctx, m); err != nil {
			errs[i] = err
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = ErrNotAttempted
			}
			break
		}
	}
	return NewBatchError(errs)
}
