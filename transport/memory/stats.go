package memory

import (
	"context"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts queue's messages: Ready the messages waiting for a consumer,
// InFlight those handed out and not settled, Delayed those waiting out a delay.
// Appended is [transport.UnknownCount]: the memory broker keeps no count of what was
// ever written. A queue nothing was ever written to or consumed from does not exist.
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
	}
	return s, nil
}
