package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.Browser = (*Transport)(nil)

// browseIdle is how long a browse waits on a partition for a record it knows exists
// before it takes the rest of the partition for gone (transaction markers and
// compaction leave offsets without records).
const browseIdle = 2 * time.Second

// Browse reads up to limit records of the queue's topic from the cursor from without
// consuming them: a consumer of its own reads the partitions directly, joins no group
// and commits nothing. A topic is a log, so "what waits on the queue" is what the
// transport's consumer group has not committed yet: the zero cursor starts each
// partition at the group's committed offset (the log start when the group has none,
// as a new consumer would), and the browse ends at the end offsets it finds. The
// cursor holds an offset per partition, so paging is exact however far into the topic
// it goes; partitions are read in order, the first one to its end, then the next.
// Delay topics are not shown. A topic that does not exist is empty. Like the
// transport's consumers, a browse reads committed records only: it ends at the last
// stable offset, so the write of a transaction still open (a move in progress) or
// aborted is not shown.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	if err := checkTopic(queue); err != nil {
		return transport.Page{}, err
	}
	pos, err := parseCursor(from)
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
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	// The last stable offsets: a browse reads committed records only.
	ends, err := adm.ListCommittedOffsets(ctx, queue)
	if err != nil {
		return transport.Page{}, fmt.Errorf("kafka: browse %q: end offsets: %w", queue, err)
	}
	if missing(ends, queue) {
		return transport.Page{Next: from, End: true}, nil
	}
	if err := ends.Error(); err != nil {
		return transport.Page{}, fmt.Errorf("kafka: browse %q: end offsets: %w", queue, err)
	}
	starts, err := adm.ListStartOffsets(ctx, queue)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return transport.Page{}, fmt.Errorf("kafka: browse %q: start offsets: %w", queue, err)
	}
	var committed kadm.OffsetResponses
	if from == "" {
		if committed, err = committedOffsets(ctx, adm, t.cfg.group); err != nil {
			return transport.Page{}, fmt.Errorf("kafka: browse %q: offsets of group %q: %w", queue, t.cfg.group, err)
		}
	}
	var parts []int32
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		parts = append(parts, o.Partition)
		end[o.Partition] = o.Offset
	})
	slices.Sort(parts)
	for _, p := range parts {
		start := int64(0)
		if s, ok := starts.Lookup(queue, p); ok && s.Offset > 0 {
			start = s.Offset
		}
		at, known := pos[p]
		if !known && from == "" {
			if c, ok := committed.Lookup(queue, p); ok && c.Err == nil && c.At >= 0 {
				at = c.At
			}
		}
		pos[p] = min(max(at, start), end[p]) // retention may have moved the start on
	}
	var out []*transport.Delivery
	for _, p := range parts {
		if len(out) == limit {
			break
		}
		if pos[p] >= end[p] {
			continue
		}
		ds, next, err := t.readPartition(ctx, queue, p, pos[p], end[p], limit-len(out))
		if err != nil {
			return transport.Page{}, err
		}
		out = append(out, ds...)
		pos[p] = next
	}
	p := transport.Page{Deliveries: out, Next: formatCursor(pos, parts), End: true}
	for _, part := range parts {
		if pos[part] < end[part] {
			p.End = false
		}
	}
	return p, nil
}

// readPartition reads up to n records of one partition from offset at, below end. It
// returns them and the offset to read next.
func (t *Transport) readPartition(ctx context.Context, topic string, part int32, at, end int64, n int) ([]*transport.Delivery, int64, error) {
	cl, err := t.factory(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(at)}}),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // transaction markers, skipped below, so a browse need not wait at them
		kgo.WithLogger(clientLogger(t.log)),
	)
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
			d := &transport.Delivery{Queue: view.queue}
			view.Decode(&record{r: r}, d)
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

// A cursor is "p:offset,p:offset…" with the next offset to read per partition.
func formatCursor(pos map[int32]int64, parts []int32) transport.Cursor {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(pos[p], 10))
	}
	return transport.Cursor(b.String())
}

func parseCursor(c transport.Cursor) (map[int32]int64, error) {
	pos := map[int32]int64{}
	if c == "" {
		return pos, nil
	}
	for _, f := range strings.Split(string(c), ",") {
		ps, os, ok := strings.Cut(f, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, &transport.BadCursorError{Cursor: c, Reason: "want partition:offset[,partition:offset…]"}
		}
		pos[int32(p)] = o
	}
	return pos, nil
}
