package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts the queue's topic from its offsets, without reading a record:
// Ready is what the transport's consumer group has not committed yet, partition by
// partition (from the log start where the group has committed nothing, as a new
// consumer would read), and Appended is the sum of the end offsets, which only grows
// and so gives the rate of arrivals. InFlight and Delayed are
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
	committed, err := adm.FetchOffsets(ctx, t.cfg.group)
	if err != nil {
		return s, fmt.Errorf("kafka: stats %q: offsets of group %q: %w", queue, t.cfg.group, err)
	}
	s.Exists = true
	ends.Each(func(o kadm.ListedOffset) {
		s.Appended += o.Offset
		at := int64(0)
		if st, ok := starts.Lookup(queue, o.Partition); ok && st.Offset > 0 {
			at = st.Offset
		}
		if c, ok := committed.Lookup(queue, o.Partition); ok && c.Err == nil && c.At > at {
			at = c.At
		}
		s.Ready += max(o.Offset-at, 0)
	})
	return s, nil
}
