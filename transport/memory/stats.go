package memory

import (
	"context"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts queue's messages: Ready the messages waiting for a consumer,
// InFlight those handed out and not settled, Delayed those waiting out a delay.
// Oldest is the meta.created_at of the first ready message (the memory broker keeps
// no time of its own; zero when that message is not an envelope). Appended is
// [transport.UnknownCount]: the memory broker keeps no count of what was ever
// written. A queue nothing was ever written to or consumed from does not exist.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return transport.QueueStats{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.QueueStats{}, transport.ErrClosed
	}
	s := transport.QueueStats{Appended: transport.UnknownCount}
	if q, ok := t.queues[queue]; ok {
		s.Exists = true
		s.Ready, s.InFlight, s.Delayed = int64(len(q.ready)), int64(q.inflight), int64(len(q.delayed))
		if len(q.ready) > 0 {
			s.Oldest, _ = envelope.CreatedAt(q.ready[0].Body)
		}
	}
	return s, nil
}
