package amqp

import (
	"context"
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

var (
	_ transport.Browser      = (*Transport)(nil)
	_ transport.QueueStatter = (*Transport)(nil)
)

// inspect opens a channel of its own on conn (a passive declare of a missing queue
// closes the channel it is made on) and looks queue up with a passive declare: found is
// false when the queue does not exist. what names the operation in errors. The caller
// closes ch when err is nil.
func inspect(conn *amqp091.Connection, what, queue string) (ch *amqp091.Channel, q amqp091.Queue, found bool, err error) {
	if ch, err = conn.Channel(); err != nil {
		return nil, q, false, fmt.Errorf("amqp: %s: open channel: %w", what, err)
	}
	q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		return ch, q, false, nil
	}
	if err != nil {
		_ = ch.Close()
		return nil, q, false, fmt.Errorf("amqp: %s %q: %w", what, queue, err)
	}
	return ch, q, true, nil
}

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
	ch, _, found, err := inspect(conn, "browse", queue)
	if err != nil {
		return transport.Page{}, err
	}
	defer func() { _ = ch.Close() }() // anything still unacknowledged goes back too
	if !found {
		return transport.Page{Next: from, End: true}, nil
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

// QueueStats asks RabbitMQ for the queue with a passive declare (queue.declare-ok
// carries its message count): Ready is the messages ready for delivery. InFlight,
// Delayed and Appended are [transport.UnknownCount]: AMQP does not report the
// messages delivered and unacknowledged (the management plugin does), delayed
// messages wait on per-delay queues of their own, and a queue keeps no count of what
// went through it. Oldest is unknown (zero): AMQP does not tell it, and a basic.get to
// look would mark the message redelivered. A queue that does not exist has Exists
// false; nothing is declared.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	s := transport.QueueStats{InFlight: transport.UnknownCount, Delayed: transport.UnknownCount, Appended: transport.UnknownCount}
	if queue == "" {
		return s, errors.New("amqp: stats: empty queue name")
	}
	conn, _, err := t.connection(ctx)
	if err != nil {
		return s, err
	}
	ch, q, found, err := inspect(conn, "stats", queue)
	if err != nil {
		return s, err
	}
	_ = ch.Close()
	s.Exists, s.Ready = found, int64(q.Messages)
	return s, nil
}
