package memory

import (
	"context"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.Browser = (*Transport)(nil)

// Browse returns up to limit of the messages waiting on queue from the place from,
// without taking them: the ready messages in delivery order, then the delayed ones.
// Deliveries handed out and not settled are not shown. The cursor is a place in that
// list ([transport.OffsetCursor]).
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	if err := ctx.Err(); err != nil {
		return transport.Page{}, err
	}
	off, err := from.Offset()
	if err != nil {
		return transport.Page{}, err
	}
	limit = max(limit, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.Page{}, transport.ErrClosed
	}
	var all []*Stored
	if q, ok := t.queues[queue]; ok {
		all = make([]*Stored, 0, len(q.ready)+len(q.delayed))
		all = append(append(all, q.ready...), q.delayed...)
	}
	return driverkit.OffsetPage(off, limit, all, func(s *Stored) *transport.Delivery {
		return &transport.Delivery{
			Queue:             queue,
			Body:              append([]byte(nil), s.Body...),
			Key:               cloneKey(s.Key),
			Headers:           cloneHeaders(s.Headers),
			Redeliveries:      s.Redeliveries,
			AttemptsHeader:    s.Attempts,
			HasAttemptsHeader: true,
			SchemaVersion:     s.SchemaVersion,
		}
	}), nil
}
