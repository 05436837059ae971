package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// QueueStatter is implemented by transports that can count a queue's messages without
// reading them: an operator's console, a dashboard, an autoscaler. Counting never
// changes the queue. What each count means, and which counts a broker can give at
// all, is said by each driver's QueueStats; a count the broker cannot tell is
// [UnknownCount].
type QueueStatter interface {
	// QueueStats counts the messages of queue now. A queue that does not exist has
	// Exists false and zero counts; counting creates nothing.
	QueueStats(ctx context.Context, queue string) (QueueStats, error)
}

// UnknownCount is the value of a [QueueStats] count that the broker cannot tell.
const UnknownCount int64 = -1

// QueueStats is what a broker says of one queue at one moment. Counts are exact on
// some brokers and approximate on others (SQS); a count the broker cannot tell is
// [UnknownCount].
type QueueStats struct {
	// Exists is false when the broker has no such queue.
	Exists bool `json:"exists"`
	// Ready counts the messages waiting to be delivered: a worker would receive
	// them next. On a log (Kafka) it is what the consumer group has not committed.
	Ready int64 `json:"ready"`
	// InFlight counts the messages delivered to a consumer and not yet settled
	// (reserved, unacknowledged, invisible).
	InFlight int64 `json:"in_flight"`
	// Delayed counts the messages waiting out a delay before they are ready.
	Delayed int64 `json:"delayed"`
	// Appended counts every message ever written to the queue: a counter that only
	// grows (a log's end offsets), from which a rate of arrivals can be told. Most
	// brokers keep none.
	Appended int64 `json:"appended"`
	// Oldest is when the oldest ready message was written: the broker's own time of
	// the message where it keeps one, else the envelope's meta.created_at (each
	// driver's QueueStats says which). It is the zero time when no message is ready
	// and when the broker cannot tell; [QueueStats.OldestAge] tells the two apart.
	Oldest time.Time `json:"oldest,omitzero"`
	// Partitions are the counts of each partition of a partitioned log (Kafka), in
	// partition order; nil on the other brokers.
	Partitions []PartitionStats `json:"partitions,omitempty"`
}

// PartitionStats is what a broker says of one partition of a log.
type PartitionStats struct {
	// Partition is the partition's number.
	Partition int32 `json:"partition"`
	// Lag counts the records the consumer group has not committed yet.
	Lag int64 `json:"lag"`
	// Oldest is the timestamp of the first record the group has not committed; the
	// zero time when Lag is 0 or the record could not be read.
	Oldest time.Time `json:"oldest,omitzero"`
}

// OldestAge is how long the oldest ready message has waited at at: at − Oldest (never
// below 0), 0 when no message is ready. ok is false when the broker cannot tell (no
// Oldest while messages are ready, or Ready itself unknown).
func (s QueueStats) OldestAge(at time.Time) (age time.Duration, ok bool) {
	if s.Ready == 0 {
		return 0, true
	}
	if s.Ready < 0 || s.Oldest.IsZero() {
		return 0, false
	}
	return max(at.Sub(s.Oldest), 0), true
}

// LagAge is how long the first record the group has not committed has waited at at:
// at − Oldest (never below 0), 0 when Lag is 0; ok is false when the record's time is
// not known.
func (p PartitionStats) LagAge(at time.Time) (age time.Duration, ok bool) {
	if p.Lag == 0 {
		return 0, true
	}
	if p.Oldest.IsZero() {
		return 0, false
	}
	return max(at.Sub(p.Oldest), 0), true
}

// ErrCannotCount matches the error of a transport that cannot count a queue's
// messages (see [CannotCountError]).
var ErrCannotCount = errors.New("transport: this broker cannot count a queue's messages")

// CannotCountError is the typed form of [ErrCannotCount]: it names the transport.
type CannotCountError struct {
	// Transport names the transport (its Go type, or its scheme).
	Transport string
	// Reason says what the broker lacks; empty when the transport does not
	// implement [QueueStatter].
	Reason string
}

// Error describes what cannot be done.
func (e *CannotCountError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("transport: %s cannot count a queue's messages (it does not implement transport.QueueStatter)", e.Transport)
	}
	return fmt.Sprintf("transport: %s cannot count a queue's messages: %s", e.Transport, e.Reason)
}

// Is makes the error match [ErrCannotCount].
func (e *CannotCountError) Is(target error) bool { return target == ErrCannotCount }

// Stats counts queue's messages through tr when it is a [QueueStatter], and otherwise
// returns a [*CannotCountError].
func Stats(ctx context.Context, tr Transport, queue string) (QueueStats, error) {
	s, ok := tr.(QueueStatter)
	if !ok {
		return QueueStats{}, &CannotCountError{Transport: fmt.Sprintf("%T", tr)}
	}
	return s.QueueStats(ctx, queue)
}
