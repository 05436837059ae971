package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts the queue's topic from its offsets: Ready is what the group has not
// committed (from the log start where it has committed nothing), Appended the sum of the
// end offsets, Partitions each partition's lag and the timestamp of its first
// uncommitted record, Oldest the earliest of those. InFlight and Delayed are
// [transport.UnknownCount]. A missing topic has Exists false.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	if err := checkTopic(queue); err != nil {
		return transport.QueueStats{}, err
	}
	if t.isClosed() {
		return transport.QueueStats{}, transport.ErrClosed
	}
	s := transport.QueueStats{InFlight: transport.UnknownCount, Delayed: transport.UnknownCount}
	offs, exists, err := t.offsets(ctx, "stats", queue, false, true)
	if err != nil || !exists {
		return s, err
	}
	s.Exists = true
	from := map[int32]kgo.Offset{}
	for _, o := range offs {
		s.Appended += o.end
		at := max(o.start, o.committed)
		lag := max(o.end-at, 0)
		s.Ready += lag
		s.Partitions = append(s.Partitions, transport.PartitionStats{Partition: o.part, Lag: lag})
		if lag > 0 {
			from[o.part] = kgo.NewOffset().At(at)
		}
	}
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
// offset of each partition in from; one that does not come within firstWait is left out.
func (t *Transport) firstRecords(ctx context.Context, topic string, from map[int32]kgo.Offset) map[int32]time.Time {
	out := map[int32]time.Time{}
	if len(from) == 0 || t.factory == nil {
		return out
	}
	cl, err := t.reader(topic, from)
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

// committedOffsets reads the group's committed offsets, waiting up to stableWait for
// pending transactional offset commits (RequireStable) before it reads them as they
// stand (a transaction left open by a killed move).
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

// coordinatorWait bounds how long fetchOffsets retries a group coordinator's transient
// errors.
const coordinatorWait = 15 * time.Second

// fetchOffsets is adm.FetchOffsets, tried again while the group's coordinator is moving
// or loading (kgo does not retry those for an admin request). An unknown group has
// committed nothing.
func fetchOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	wctx, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	var resp kadm.OffsetResponses
	err := driverkit.Backoff{Min: 50 * time.Millisecond, Max: time.Second}.Retry(wctx, coordinatorMoving, func() (err error) {
		resp, err = adm.FetchOffsets(ctx, group)
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return kadm.OffsetResponses{}, nil
	}
	return resp, err
}

// coordinatorMoving reports whether err is a group coordinator's transient state.
func coordinatorMoving(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator)
}
