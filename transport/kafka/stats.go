package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts the queue's topic from its offsets, without reading a record:
// Ready is what the transport's consumer group has not committed yet, partition by
// partition (from the log start where the group has committed nothing, as a new
// consumer would read), and Appended is the sum of the end offsets, which only grows
// and so gives the rate of arrivals. Partitions has each partition's lag (what the
// group has not committed) and the timestamp of its first uncommitted record (read with
// a consumer of its own that joins no group, one record per lagging partition; the
// record timestamp is the envelope's meta.created_at, as the binding writes it); Oldest
// is the earliest of those. InFlight and Delayed are
// [transport.UnknownCount]: Kafka does not know what a consumer holds between its
// commits, and delayed messages wait on delay topics of their own. Offsets of
// transaction markers and compacted records count as messages. A topic that does not
// exist has Exists false.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	if err := checkTopic(queue); err != nil {
		return transport.QueueStats{}, err
	}
	if t.isClosed() {
		return transport.QueueStats{}, transport.ErrClosed
	}
	s := transport.QueueStats{InFlight: transport.UnknownCount, Delayed: transport.UnknownCount}
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	ends, err := adm.ListEndOffsets(ctx, queue)
	if err != nil {
		return s, fmt.Errorf("kafka: stats %q: end offsets: %w", queue, err)
	}
	if missing(ends, queue) {
		return s, nil
	}
	if err := ends.Error(); err != nil {
		return s, fmt.Errorf("kafka: stats %q: end offsets: %w", queue, err)
	}
	starts, err := adm.ListStartOffsets(ctx, queue)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return s, fmt.Errorf("kafka: stats %q: start offsets: %w", queue, err)
	}
	committed, err := committedOffsets(ctx, adm, t.cfg.group)
	if err != nil {
		return s, fmt.Errorf("kafka: stats %q: offsets of group %q: %w", queue, t.cfg.group, err)
	}
	s.Exists = true
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		s.Appended += o.Offset
		at := int64(0)
		if st, ok := starts.Lookup(queue, o.Partition); ok && st.Offset > 0 {
			at = st.Offset
		}
		if c, ok := committed.Lookup(queue, o.Partition); ok && c.Err == nil && c.At > at {
			at = c.At
		}
		lag := max(o.Offset-at, 0)
		s.Ready += lag
		s.Partitions = append(s.Partitions, transport.PartitionStats{Partition: o.Partition, Lag: lag})
		if lag > 0 {
			from[o.Partition] = kgo.NewOffset().At(at)
		}
	})
	slices.SortFunc(s.Partitions, func(a, b transport.PartitionStats) int { return int(a.Partition - b.Partition) })
	firsts := t.firstRecords(ctx, queue, from)
	for i, p := range s.Partitions {
		if ts, ok := firsts[p.Partition]; ok {
			s.Partitions[i].Oldest = ts
			if s.Oldest.IsZero() || ts.Before(s.Oldest) {
				s.Oldest = ts
			}
		}
	}
	return s, nil
}

// firstWait bounds how long firstRecords waits for the partitions' first records.
const firstWait = 3 * time.Second

// firstRecords reads the timestamp of the first committed record at or after the
// offset of each partition in from, with a consumer of its own (no group, nothing
// committed). A partition whose record does not come within firstWait (an open
// transaction holds it back, the transport has no consumer factory) is left out.
func (t *Transport) firstRecords(ctx context.Context, topic string, from map[int32]kgo.Offset) map[int32]time.Time {
	out := map[int32]time.Time{}
	if len(from) == 0 || t.factory == nil {
		return out
	}
	cl, err := t.factory(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.WithLogger(clientLogger(t.log)),
	)
	if err != nil {
		return out
	}
	defer cl.Close()
	wctx, cancel := context.WithTimeout(ctx, firstWait)
	defer cancel()
	for len(out) < len(from) && wctx.Err() == nil {
		cl.PollRecords(wctx, 0).EachRecord(func(r *kgo.Record) {
			if _, done := out[r.Partition]; !done {
				out[r.Partition] = r.Timestamp
			}
		})
	}
	return out
}

// stableWait bounds the wait of committedOffsets for pending transactional offset
// commits.
const stableWait = 5 * time.Second

// committedOffsets reads the group's committed offsets, waiting for pending
// transactional offset commits to be resolved (RequireStable, KIP-447): right after a
// transactional move (a DLQ redrive) commits, its offset commit may still be pending on
// the broker for a moment, and the record it moved would be shown as waiting. While a
// transaction stays open longer (a move killed in its middle, until the broker aborts
// it at its timeout) the stable read is refused; after stableWait the offsets as they
// stand are read instead. A group's coordinator that is moving or loading (the first
// read of a new group, a broker restart) answers with a retriable error for a moment:
// the read is tried again, backing off, for up to coordinatorWait.
func committedOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	sctx, cancel := context.WithTimeout(ctx, stableWait)
	resp, err := fetchOffsets(kadm.RequireStable(sctx), adm, group)
	cancel()
	if err == nil {
		unstable := false
		resp.Each(func(o kadm.OffsetResponse) {
			unstable = unstable || errors.Is(o.Err, kerr.UnstableOffsetCommit)
		})
		if !unstable {
			return resp, nil
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	return fetchOffsets(ctx, adm, group)
}

// coordinatorWait bounds how long fetchOffsets retries a group coordinator's
// transient errors.
const coordinatorWait = 15 * time.Second

// fetchOffsets is adm.FetchOffsets, tried again while the group's coordinator is not
// available, not loaded yet or has moved (errors kgo gives back rather than retrying
// for an admin request), with a backoff from 50 ms doubling to 1 s, for up to
// coordinatorWait or until ctx ends. A group the broker does not know has committed
// nothing: GROUP_ID_NOT_FOUND (the answer of brokers that speak of groups as KIP-848
// does) reads as no offsets.
func fetchOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	deadline := time.Now().Add(coordinatorWait)
	wait := 50 * time.Millisecond
	for {
		resp, err := adm.FetchOffsets(ctx, group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return kadm.OffsetResponses{}, nil
		}
		if err == nil || !coordinatorMoving(err) || time.Now().Add(wait).After(deadline) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// coordinatorMoving reports whether err is a group coordinator's transient state.
func coordinatorMoving(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator)
}
