package amqp

import (
	"context"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// A consumer opened with [transport.ConsumeOptions.Transactional] puts its channel in
// AMQP transaction mode (tx.select) and settles every delivery in a transaction of its
// own on that channel: the writes are published on it, the delivery is acknowledged on
// it, and tx.commit makes them all at once. A process killed before the commit leaves
// none of them: the broker rolls the transaction back when the channel closes, and the
// delivery goes back to its queue. Each settlement costs a commit round trip and the
// settlements of one consumer are made one at a time, so the runtime's consumers do
// not use it; a DLQ redrive does.

// txBeforeCommit, set by tests, runs between the acknowledgement and the commit.
var txBeforeCommit func()

// txRewind gives m back in a transaction of its own. A channel that closed requeued it
// already, and a commit that fails closes the channel, which requeues it too.
func (c *consumer) txRewind(ctx context.Context, m msg) {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if ch := m.s.ch; !ch.IsClosed() && ch.Nack(m.d.DeliveryTag, false, true) == nil {
		_ = c.commit(ctx, ch)
	}
}

// AckWrites acknowledges m and makes its writes ws (none for a plain Ack) in one
// transaction on m's channel.
func (c *consumer) AckWrites(ctx context.Context, m msg, ws []*transport.Message) error {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	ch := m.s.ch
	if ch.IsClosed() {
		return c.lost(nil)
	}
	queue := c.queue
	if len(ws) > 0 {
		queue = ws[0].Queue
	}
	conn, gen, err := c.t.connection(ctx)
	if err != nil {
		return &transport.SettleWriteError{Queue: queue, Err: err}
	}
	pc := &pubChan{ch: ch, conn: conn, gen: gen, rt: m.s.rt}
	var ss []sent
	err = driverkit.SendAll(ctx, ws, func(ctx context.Context, w *transport.Message) error {
		// RabbitMQ routes a transaction's publishes when it commits, and declares are
		// not part of it: the target is declared again now (or, with declare=false,
		// checked), not taken from the cache, so that a queue deleted since the last
		// write is there to take this one.
		err := c.t.check(w)
		if err == nil {
			err = c.t.ensureQueue(conn, gen, w)
		}
		if err == nil {
			var s sent
			if s, err = c.t.send(ctx, pc, w, true); err == nil {
				ss = append(ss, s)
			}
		}
		return err
	})
	if err == nil {
		if err = ch.Ack(m.d.DeliveryTag, false); err != nil {
			err = c.lost(err)
		}
	}
	if err != nil {
		resolve(ss...)
		c.rollback(ch)
		return err
	}
	if txBeforeCommit != nil {
		txBeforeCommit()
	}
	if err := c.commit(ctx, ch); err != nil {
		resolve(ss...)
		// Rolled back, or (the connection lost after the broker committed) made: either
		// way each message is in one queue, never in both and never in none.
		return &transport.SettleWriteError{Queue: queue, Err: err}
	}
	return c.rewriteReturned(ctx, ws, ss)
}

// ensureQueue makes sure m's queue exists now, bypassing the declare cache: declared
// again, or with declare=false checked with a passive declare. A delayed write is left
// to send, which declares its delay queue.
func (t *Transport) ensureQueue(conn *amqp091.Connection, gen uint64, m *transport.Message) error {
	if m.Delay > 0 {
		return nil
	}
	if !t.s.noDeclare {
		t.forget(m.Queue)
		return t.declare(conn, gen, m.Queue, nil)
	}
	ch, _, found, err := inspect(conn, "write to", m.Queue)
	if err == nil {
		_ = ch.Close()
		if !found {
			err = fmt.Errorf("amqp: write to %q: the queue does not exist (declare=false): %w", m.Queue, ErrUnroutable)
		}
	}
	return err
}

// rewriteReturned covers the window ensureQueue leaves: a target queue deleted between
// its declare and the commit. RabbitMQ sends the basic.return of a transaction's
// unroutable publish when it commits, after the acknowledgement was made, so a returned
// write is written again, confirmed, outside the transaction (its queue declared anew):
// the message is then on the target queue once and the delivery acknowledged, as the
// move meant. Only if that write fails too is an error returned, naming the message.
func (c *consumer) rewriteReturned(ctx context.Context, writes []*transport.Message, ss []sent) error {
	if len(ss) == 0 || ss[0].rt == nil {
		return nil
	}
	ss[0].rt.sync() // tx.commit-ok is in: the returns sent on commit are buffered or recorded
	var again []*transport.Message
	for i, s := range ss {
		if returned, code, text := s.rt.resolve(s.key); returned {
			c.t.log.Warn("amqp: a moved message came back from the broker at commit (its queue was deleted); writing it again",
				"queue", s.key.key, "reply_code", code, "reply_text", text)
			c.t.forget(s.key.key)
			again = append(again, writes[i])
		}
	}
	if len(again) == 0 {
		return nil
	}
	ss, err := c.t.publishWrites(ctx, again)
	if err == nil {
		err = c.t.confirmed(ctx, again, ss)
	}
	if err != nil {
		return &transport.SettleWriteError{Queue: again[0].Queue,
			Err: fmt.Errorf("amqp: a moved message was returned at commit (its queue deleted meanwhile) and could not be written again: %w", err)}
	}
	return nil
}

// commit sends tx.commit and waits for it until ctx ends; a commit that does not
// answer closes the channel, which rolls the transaction back.
func (c *consumer) commit(ctx context.Context, ch *amqp091.Channel) error {
	done := make(chan error, 1)
	go func() { done <- ch.TxCommit() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("amqp: tx.commit: %w", err)
		}
		return nil
	case <-ctx.Done():
		_ = ch.Close()
		<-done
		return fmt.Errorf("amqp: tx.commit: %w (channel closed: rolled back unless the broker had committed)", ctx.Err())
	}
}

// rollback undoes what the open transaction holds; when it fails the channel is
// closed, which rolls back too.
func (c *consumer) rollback(ch *amqp091.Channel) {
	if !ch.IsClosed() && ch.TxRollback() != nil {
		_ = ch.Close()
	}
}
