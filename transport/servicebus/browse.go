package servicebus

import (
	"context"
	"fmt"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.Browser = (*Transport)(nil)

// peekFunc peeks up to n messages of a queue from sequence number from.
type peekFunc func(ctx context.Context, from int64, n int) ([]*azservicebus.ReceivedMessage, error)

// peeker opens a receiver on queue to peek with; the returned func closes it.
func (t *Transport) peeker(ctx context.Context, queue string) (peekFunc, func(), error) {
	r, err := t.ns.newReceiver(queue)
	if err != nil {
		return nil, nil, err
	}
	done := func() { _ = r.Close(context.WithoutCancel(ctx)) }
	return func(ctx context.Context, from int64, max int) ([]*azservicebus.ReceivedMessage, error) {
		return r.PeekMessages(ctx, max, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
	}, done, nil
}

// Browse reads up to limit messages of queue from the cursor from with Service Bus's
// peek, which neither locks nor completes a message and does not count a delivery.
// Messages come in sequence-number order (messages locked by a receiver are shown
// too) and the cursor is the next sequence number, so paging is exact.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	seq, err := parseSequence(from)
	if err != nil {
		return transport.Page{}, err
	}
	if t.consumers.Closed() {
		return transport.Page{}, transport.ErrClosed
	}
	fn, done, err := t.peeker(ctx, queue)
	if err != nil {
		return transport.Page{}, fmt.Errorf("servicebus: browse %q: %w", queue, err)
	}
	defer done()
	return browsePages(ctx, queue, fn, seq, max(limit, 1))
}

// browsePages peeks from sequence number seq until it has limit messages or a peek
// comes back empty (a peek may return fewer messages than there are).
func browsePages(ctx context.Context, queue string, peek peekFunc, seq int64, limit int) (transport.Page, error) {
	p := transport.Page{Next: sequenceCursor(seq)}
	for len(p.Deliveries) < limit {
		msgs, err := peek(ctx, seq, limit-len(p.Deliveries))
		if err != nil {
			return transport.Page{}, fmt.Errorf("servicebus: browse %q: %w", queue, err)
		}
		if len(msgs) == 0 {
			p.End = true
			break
		}
		for _, m := range msgs {
			if m.SequenceNumber == nil || *m.SequenceNumber < seq {
				return transport.Page{}, fmt.Errorf("servicebus: browse %q: a peeked message has no usable sequence number", queue)
			}
			if len(p.Deliveries) == limit {
				break
			}
			p.Deliveries = append(p.Deliveries, Reconcile(queue, m))
			seq = *m.SequenceNumber + 1
		}
		p.Next = sequenceCursor(seq)
	}
	return p, nil
}

func sequenceCursor(seq int64) transport.Cursor {
	if seq <= 0 {
		return ""
	}
	return transport.Cursor(strconv.FormatInt(seq, 10))
}

func parseSequence(c transport.Cursor) (int64, error) {
	if c == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(c), 10, 64)
	if err != nil || n < 0 {
		return 0, &transport.BadCursorError{Cursor: c, Reason: "want a sequence number"}
	}
	return n, nil
}
