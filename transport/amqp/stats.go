package amqp

import (
	"context"
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

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
	// A channel of its own: a passive declare of a missing queue closes the channel.
	ch, err := conn.Channel()
	if err != nil {
		return s, fmt.Errorf("amqp: stats: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return s, nil
		}
		return s, fmt.Errorf("amqp: stats %q: %w", queue, err)
	}
	s.Exists, s.Ready = true, int64(q.Messages)
	return s, nil
}
