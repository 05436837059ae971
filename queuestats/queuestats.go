// Package queuestats counts a work queue and its dead-letter queue in one look: the
// numbers an operator pages on and an autoscaler reads (messages ready, in flight,
// delayed and dead-lettered, and how long the oldest ready message has waited).
//
// The metrics of package otel/metrics (its QueueCollector), the babelqueue stats
// command and the console all count through [Take], so they show the same numbers for
// the same moment. The counts come from the transport's [transport.QueueStatter]; what
// each count means on each broker, and which ones a broker cannot tell
// ([transport.UnknownCount]), is said by each driver's QueueStats.
package queuestats

import (
	"context"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Queue names a work queue and its dead-letter queue.
type Queue struct {
	// Name is the work queue.
	Name string
	// DLQ is its dead-letter queue; empty for the name the runtime dead-letters to on
	// the transport ([dlq.QueueFor]: Name + ".dlq"; on SQS Name + "-dlq", before a
	// .fifo suffix).
	DLQ string
}

// Snapshot is one look at a work queue and its dead-letter queue.
type Snapshot struct {
	// Queue and DLQ are the queues counted.
	Queue string `json:"queue"`
	DLQ   string `json:"dlq"`
	// At is when the counts were taken (after the broker answered for both queues).
	At time.Time `json:"at"`
	// Stats are the work queue's counts, DLQStats the dead-letter queue's.
	Stats    transport.QueueStats `json:"stats"`
	DLQStats transport.QueueStats `json:"dlq_stats"`
}

// DeadLettered counts the messages in the dead-letter queue: its Ready count (nothing
// consumes a dead-letter queue, so every message there is ready), 0 when it does not
// exist yet, [transport.UnknownCount] when the broker cannot tell.
func (s Snapshot) DeadLettered() int64 { return s.DLQStats.Ready }

// OldestAge is how long the work queue's oldest ready message had waited at At; ok is
// false when the broker cannot tell.
func (s Snapshot) OldestAge() (time.Duration, bool) { return s.Stats.OldestAge(s.At) }

// Take counts q and its dead-letter queue on tr now. A transport that cannot count
// returns a [*transport.CannotCountError].
func Take(ctx context.Context, tr transport.Transport, q Queue) (Snapshot, error) {
	if q.Name == "" {
		return Snapshot{}, fmt.Errorf("queuestats: empty queue name")
	}
	s := Snapshot{Queue: q.Name, DLQ: q.DLQ}
	if s.DLQ == "" {
		s.DLQ = dlq.QueueFor(q.Name, tr.Capabilities())
	}
	var err error
	if s.Stats, err = transport.Stats(ctx, tr, s.Queue); err != nil {
		return Snapshot{}, err
	}
	if s.DLQStats, err = transport.Stats(ctx, tr, s.DLQ); err != nil {
		return Snapshot{}, err
	}
	s.At = time.Now()
	return s, nil
}
