package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.Browser = (*Transport)(nil)

// browseIdle is how long a browse waits on a partition for a record it knows exists
// before it takes the rest of the partition for gone (transaction markers, compaction).
const browseIdle = 2 * time.Second

// Browse reads up to limit records of the queue's topic from the cursor from without
// consuming them (a client of its own, no group, no commit). The zero cursor starts each
// partition at the group's committed offset; the cursor holds an offset per partition.
// It reads committed records only and shows no delay topic; a missing topic is empty.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	if err := checkTopic(queue); err != nil {
		return transport.Page{}, err
	}
	pos, err := driverkit.ParsePartitionCursor(from)
	if err != nil {
		return transport.Page{}, err
	}
	if t.isClosed() {
		return transport.Page{}, transport.ErrClosed
	}
	if t.factory == nil {
		return transport.Page{}, errors.New("kafka: this transport was built without a consumer factory, so it cannot browse")
	}
	limit = max(limit, 1)
	offs, exists, err := t.offsets(ctx, "browse", queue, true, from == "")
	if err != nil {
		return transport.Page{}, err
	} else if !exists {
		return transport.Page{Next: from, End: true}, nil
	}
	parts := make([]int32, len(offs))
	for i, o := range offs {
		parts[i] = o.part
		at, known := pos[o.part]
		if !known && o.committed >= 0 {
			at = o.committed
		}
		pos[o.part] = min(max(at, o.start), o.end) // retention may have moved the start on
	}
	var out []*transport.Delivery
	end := true
	for _, o := range offs {
		if len(out) < limit && pos[o.part] < o.end {
			ds, next, err := t.readPartition(ctx, queue, o.part, pos[o.part], o.end, limit-len(out))
			if err != nil {
				return transport.Page{}, err
			}
			out = append(out, ds...)
			pos[o.part] = next
		}
		end = end && pos[o.part] >= o.end
	}
	return transport.Page{Deliveries: out, Next: driverkit.PartitionCursor(pos, parts), End: end}, nil
}

// partOffsets are one partition's offsets: its log start, its end and the group's
// committed offset (-1: none).
type partOffsets struct {
	part                  int32
	start, end, committed int64
}

// offsets lists the queue's partitions in order with their offsets: the end is the last
// stable offset when stable, the committed offset is read when group. exists is false
// for a topic that does not exist.
func (t *Transport) offsets(ctx context.Context, op, queue string, stable, group bool) ([]partOffsets, bool, error) {
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	list := adm.ListEndOffsets
	if stable {
		list = adm.ListCommittedOffsets
	}
	ends, err := list(ctx, queue)
	if err == nil && missing(ends, queue) {
		return nil, false, nil
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, false, fmt.Errorf("kafka: %s %q: end offsets: %w", op, queue, err)
	}
	starts, err := adm.ListStartOffsets(ctx, queue)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, false, fmt.Errorf("kafka: %s %q: start offsets: %w", op, queue, err)
	}
	var committed kadm.OffsetResponses
	if group {
		if committed, err = committedOffsets(ctx, adm, t.cfg.group); err != nil {
			return nil, false, fmt.Errorf("kafka: %s %q: offsets of group %q: %w", op, queue, t.cfg.group, err)
		}
	}
	var out []partOffsets
	ends.Each(func(o kadm.ListedOffset) {
		p := partOffsets{part: o.Partition, end: o.Offset, committed: -1}
		if s, ok := starts.Lookup(queue, o.Partition); ok && s.Offset > 0 {
			p.start = s.Offset
		}
		if c, ok := committed.Lookup(queue, o.Partition); ok && c.Err == nil && c.At >= 0 {
			p.committed = c.At
		}
		out = append(out, p)
	})
	slices.SortFunc(out, func(a, b partOffsets) int { return cmp.Compare(a.part, b.part) })
	return out, true, nil
}

// reader is a client of its own (no group, nothing committed) that reads committed
// records of topic's partitions from the offsets given.
func (t *Transport) reader(topic string, from map[int32]kgo.Offset, opts ...kgo.Opt) (*kgo.Client, error) {
	return t.factory(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchMaxWait(250*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.WithLogger(clientLogger(t.log)))...)
}

// readPartition reads up to n records of one partition from offset at, below end. It
// returns them and the offset to read next.
func (t *Transport) readPartition(ctx context.Context, topic string, part int32, at, end int64, n int) ([]*transport.Delivery, int64, error) {
	// Transaction markers are kept (and skipped below), so a browse need not wait at them.
	cl, err := t.reader(topic, map[int32]kgo.Offset{part: kgo.NewOffset().At(at)}, kgo.KeepControlRecords())
	if err != nil {
		return nil, at, fmt.Errorf("kafka: browse %q: %w", topic, err)
	}
	defer cl.Close()
	view := &consumer{queue: topic}
	var out []*transport.Delivery
	next := at
	quiet := time.Now()
	for next < end && len(out) < n {
		pctx, cancel := context.WithTimeout(ctx, browseIdle)
		fs := cl.PollRecords(pctx, n-len(out))
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, at, err
		}
		got := false
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, at, fmt.Errorf("kafka: browse %q partition %d: %w", topic, part, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < next || r.Offset >= end || len(out) == n {
				return
			}
			got = true
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			rec := &record{r: r}
			rec.decode()
			d := &transport.Delivery{Queue: view.queue}
			view.Decode(rec, d)
			out = append(out, d)
		})
		if got {
			quiet = time.Now()
		} else if time.Since(quiet) >= browseIdle {
			// Offsets below end that hold no record: markers, compacted away.
			next = end
		}
	}
	return out, next, nil
}

// missing reports whether the listing says the topic does not exist.
func missing(l kadm.ListedOffsets, topic string) bool {
	if len(l[topic]) == 0 {
		return true
	}
	gone := false
	l.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			gone = true
		}
	})
	return gone
}
