package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

// A consumer opened with [transport.ConsumeOptions.Transactional] puts its channel in
// AMQP transaction mode (tx.select) and settles every delivery in a transaction of its
// own on that channel: the writes are published on it, the delivery is acknowledged on
// it, and tx.commit makes them all at once. A process killed before the commit leaves
// none of them: the broker rolls the transaction back when the channel closes, and the
// delivery goes back to its queue. Each settlement costs a commit round trip and the
// settlements of one consumer are made one at a time, so the runtime's consumers do
// not use it; a DLQ redrive does.

// txSettle is the transaction state of a transactional consumer.
type txSettle struct {
	// mu makes one transaction at a time on the channel: the publishes and the ack of
	// one settlement must not be committed by another's tx.commit.
	mu sync.Mutex
}

// txBeforeCommit, set by tests, runs between the acknowledgement and the commit.
var txBeforeCommit func()

// newTxSettle returns the transaction state for a consumer opened with opts, or nil.
func newTxSettle(opts transport.ConsumeOptions) *txSettle {
	if !opts.Transactional {
		return nil
	}
	return &txSettle{}
}

// txSelect puts a consumer channel in transaction mode when the consumer is
// transactional.
func (c *consumer) txSelect(ch *amqp091.Channel) error {
	if c.tx == nil {
		return nil
	}
	if err := ch.Tx(); err != nil {
		return fmt.Errorf("amqp: transaction mode (tx.select): %w", err)
	}
	return nil
}

// SettlesAtomically reports whether the consumer settles in AMQP transactions: it was
// opened with [transport.ConsumeOptions.Transactional].
func (c *consumer) SettlesAtomically() bool { return c.tx != nil }

// settleTx settles one delivery in a transaction on its own channel.
func (c *consumer) settleTx(ctx context.Context, h msg, st transport.Settlement) error {
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	ch := h.s.ch
	if ch.IsClosed() {
		if st.Outcome == transport.Rewind {
			return nil // the broker requeued it when the channel closed
		}
		return c.lost(nil)
	}
	if st.Outcome == transport.Rewind {
		if err := ch.Nack(h.d.DeliveryTag, false, true); err == nil {
			_ = c.commit(ctx, ch) // a commit that fails closes the channel: requeued too
		}
		return nil
	}
	queue := c.queue
	if len(st.Writes) > 0 {
		queue = st.Writes[0].Queue
	}
	conn, gen, err := c.t.connection(ctx)
	if err != nil {
		return &transport.SettleWriteError{Queue: queue, Err: err}
	}
	pc := &pubChan{ch: ch, conn: conn, gen: gen, rt: h.s.rt}
	ss := make([]sent, 0, len(st.Writes))
	for _, m := range st.Writes {
		if m == nil || m.Queue == "" {
			c.rollbackSent(ch, ss)
			return &transport.SettleWriteError{Err: errors.New("amqp: settle write has no queue")}
		}
		if err := transport.CheckSize("amqp", m.Queue, len(m.Body), c.t.s.maxSize); err != nil {
			c.rollbackSent(ch, ss)
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		// RabbitMQ routes a transaction's publishes when it commits, and declares are
		// not part of it: the target is declared again now (or, with declare=false,
		// checked), not taken from the cache, so that a queue deleted since the last
		// write is there to take this one.
		if err := c.t.ensureQueue(conn, gen, m); err != nil {
			c.rollbackSent(ch, ss)
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		s, err := c.t.send(ctx, pc, m, true)
		if err != nil {
			c.rollbackSent(ch, ss)
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		ss = append(ss, s)
	}
	if err := ch.Ack(h.d.DeliveryTag, false); err != nil {
		c.rollbackSent(ch, ss)
		return c.lost(err)
	}
	if txBeforeCommit != nil {
		txBeforeCommit()
	}
	if err := c.commit(ctx, ch); err != nil {
		c.resolveSent(ss)
		// Rolled back, or (the connection lost after the broker committed) made: either
		// way each message is in one queue, never in both and never in none.
		return &transport.SettleWriteError{Queue: queue, Err: err}
	}
	return c.rewriteReturned(ctx, st.Writes, ss)
}

// ensureQueue makes sure m's queue exists now, bypassing the declare cache: declared
// again, or with declare=false checked with a passive declare (on the transport's
// admin channel, which a missing queue closes). A delayed write is left to send, which
// declares its delay queue.
func (t *Transport) ensureQueue(conn *amqp091.Connection, gen uint64, m *transport.Message) error {
	if m.Delay > 0 {
		return nil
	}
	if !t.s.noDeclare {
		t.forget(m.Queue)
		return t.declare(conn, gen, m.Queue, nil)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(m.Queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("amqp: write to %q: the queue does not exist (declare=false): %w: %w", m.Queue, ErrUnroutable, err)
	}
	return nil
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
	if err := c.t.writeConfirmed(ctx, again); err != nil {
		return &transport.SettleWriteError{Queue: again[0].Queue,
			Err: fmt.Errorf("amqp: a moved message was returned at commit (its queue deleted meanwhile) and could not be written again: %w", err)}
	}
	return nil
}

// resolveSent forgets the publishes of ss.
func (c *consumer) resolveSent(ss []sent) {
	for _, s := range ss {
		if s.rt != nil {
			s.rt.resolve(s.key)
		}
	}
}

// rollbackSent rolls the open transaction back and forgets the publishes of ss.
func (c *consumer) rollbackSent(ch *amqp091.Channel, ss []sent) {
	c.resolveSent(ss)
	c.rollback(ch)
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
	if ch.IsClosed() {
		return
	}
	if err := ch.TxRollback(); err != nil {
		_ = ch.Close()
	}
}
