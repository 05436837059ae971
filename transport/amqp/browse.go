package amqp

import (
	"context"
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.Browser = (*Transport)(nil)

// Browse reads up to limit messages of queue from the place from without consuming
// them: on a channel of its own it gets (basic.get, manual acknowledgement) the first
// from+limit+1 messages, then gives all of them back at once (basic.nack, requeue), so
// RabbitMQ puts each back at its place in the queue. RabbitMQ has no other way to look
// into a queue, and it leaves two marks: the messages lent are flagged redelivered,
// and a quorum queue (declared elsewhere) counts a delivery for each, which its
// delivery-limit sees. While a page is read its messages are held, not handed to
// consumers. Reading a page costs the messages before it too (a page far into a long
// queue reads everything in front of it); the cursor is a place in the queue
// ([transport.OffsetCursor]). A queue that does not exist is empty: Browse declares
// nothing.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	off, err := from.Offset()
	if err != nil {
		return transport.Page{}, err
	}
	if queue == "" {
		return transport.Page{}, errors.New("amqp: browse: empty queue name")
	}
	limit = max(limit, 1)
	conn, _, err := t.connection(ctx)
	if err != nil {
		return transport.Page{}, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return transport.Page{}, fmt.Errorf("amqp: browse: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }() // anything still unacknowledged goes back too
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return transport.Page{Next: from, End: true}, nil
		}
		return transport.Page{}, fmt.Errorf("amqp: browse %q: %w", queue, err)
	}
	var got []amqp091.Delivery
	giveBack := func() error {
		if len(got) == 0 {
			return nil
		}
		return ch.Nack(got[len(got)-1].DeliveryTag, true, true)
	}
	for len(got) <= off+limit {
		if err := ctx.Err(); err != nil {
			_ = giveBack()
			return transport.Page{}, err
		}
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			_ = giveBack()
			return transport.Page{}, fmt.Errorf("amqp: browse %q: %w", queue, err)
		}
		if !ok {
			break
		}
		got = append(got, d)
	}
	if err := giveBack(); err != nil {
		return transport.Page{}, fmt.Errorf("amqp: browse %q: give the messages back: %w", queue, err)
	}
	p := transport.Page{End: len(got) <= off+limit}
	for i := off; i < len(got) && i < off+limit; i++ {
		d := &transport.Delivery{Queue: queue}
		decode(&got[i], d)
		d.Redeliveries = 0 // the flag is the browse's own doing
		p.Deliveries = append(p.Deliveries, d)
	}
	p.Next = transport.OffsetCursor(off + len(p.Deliveries))
	return p, nil
}
