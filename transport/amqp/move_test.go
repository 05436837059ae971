package amqp

import (
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

// ready counts the messages ready on queue (a passive declare).
func ready(t *testing.T, tr *Transport, queue string) int64 {
	t.Helper()
	s, err := tr.QueueStats(ctxT(t), queue)
	if err != nil {
		t.Fatal(err)
	}
	return s.Ready
}

// consumeOneTx publishes body to from and opens a transactional consumer of from,
// closed when the test ends.
func consumeOneTx(t *testing.T, tr transport.Transport, from string, body []byte) transport.Consumer {
	t.Helper()
	ctx := ctxT(t)
	if err := tr.Publish(ctx, &transport.Message{Queue: from, Body: body}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, from, transport.ConsumeOptions{Prefetch: 1, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	return c
}

// A transactional consumer moves a message (write and ack in one commit): it is on
// the target queue once and gone from its own.
func TestTransactionalMoveCommits(t *testing.T) {
	ctx := ctxT(t)
	tr := openT(t)
	from, to := newQueue(t), newQueue(t)
	body := []byte(`{"job":"urn:babel:t:move","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)
	c := consumeOneTx(t, tr, from, body)
	if !transport.SettlesAtomically(c) {
		t.Fatal("a transactional consumer does not report atomic settlements")
	}
	d := receive(t, c, 10*time.Second)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: to, Body: body}}}); err != nil {
		t.Fatal(err)
	}
	// A rewound delivery comes back (its nack is committed too).
	if err := tr.Publish(ctx, &transport.Message{Queue: from, Body: body}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, c, 10*time.Second)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, c, 10*time.Second)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
	if n := ready(t, tr, to); n != 1 {
		t.Fatalf("%d messages on the target queue, want 1", n)
	}
	if n := ready(t, tr, from); n != 0 {
		t.Fatalf("%d messages left on the source queue, want 0", n)
	}
	plain, err := tr.Consume(ctx, from, transport.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	if transport.SettlesAtomically(plain) {
		t.Fatal("a plain consumer reports atomic settlements")
	}
}

// The connection dies after the write and the ack were sent and before the commit
// (what a killed process looks like to the broker): the broker rolls both back, so
// the message is on its own queue only.
func TestTransactionalMoveKilledBeforeCommit(t *testing.T) {
	ctx := ctxT(t)
	k := &killer{}
	tr := openT(t, WithDialer(k.dial))
	check := openT(t)
	from, to := newQueue(t), newQueue(t)
	body := []byte(`{"job":"urn:babel:t:kill","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)
	c := consumeOneTx(t, tr, from, body)
	d := receive(t, c, 10*time.Second)
	txBeforeCommit = k.killAll
	t.Cleanup(func() { txBeforeCommit = nil })
	err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: to, Body: body}}})
	txBeforeCommit = nil
	if !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Settle with the connection cut before the commit: %v, want ErrSettleWrite", err)
	}
	if n := ready(t, check, to); n != 0 {
		t.Fatalf("%d messages on the target queue after a rolled-back move, want 0", n)
	}
	// A failed Ack is followed by a Rewind (the runtime's rule); the consumer resumes
	// on a new connection and gets the message again.
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, c, 30*time.Second)
	if string(d.Body) != string(body) {
		t.Fatalf("redelivered %q", d.Body)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: to, Body: body}}}); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
	if n := ready(t, check, to); n != 1 {
		t.Fatalf("%d messages on the target queue, want 1", n)
	}
	if n := ready(t, check, from); n != 0 {
		t.Fatalf("%d messages on the source queue, want 0", n)
	}
}

// A transactional move whose target queue was deleted: declared again before the write
// (RabbitMQ routes a transaction's publishes at commit, and declares are not part of
// it), or deleted between that declare and the commit (the hook): the write comes back
// at commit and is written again, confirmed. Either way the message lands on the target
// once and leaves its own queue. With declare=false a missing target fails the move
// with ErrUnroutable and the message stays where it is.
func TestTransactionalMoveToDeletedQueue(t *testing.T) {
	body := []byte(`{"job":"urn:babel:t:move","trace_id":"t","data":{},"meta":{"id":"m1","schema_version":1},"attempts":0}`)
	move := func(to string, d *transport.Delivery) transport.Settlement {
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
			{Queue: to, Body: d.Body, Projection: transport.Projection{MessageID: "m1"}}}}
	}
	setup := func(t *testing.T, opts ...Option) (tr *Transport, ch *amqp091.Channel, from, to string, c transport.Consumer) {
		ctx := ctxT(t)
		tr = openT(t, opts...)
		ch = rawChannel(t, rawConn(t))
		from, to = newQueue(t), newQueue(t)
		if _, err := ch.QueueDeclare(from, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(to, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := tr.Publish(ctx, &transport.Message{Queue: to, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err) // to is now in the declare cache
		}
		if _, err := ch.QueueDelete(to, false, false, false); err != nil {
			t.Fatal(err)
		}
		return tr, ch, from, to, consumeOneTx(t, tr, from, body)
	}
	landed := func(t *testing.T, c transport.Consumer, ch *amqp091.Channel, from, to string) {
		t.Helper()
		_ = c.Close(ctxT(t))
		if got := drain(t, ch, to); len(got) != 1 || got[0] != string(body) {
			t.Fatalf("%s holds %q, want the one moved message", to, got)
		}
		if n := queueCount(t, ch, from); n != 0 {
			t.Fatalf("%s holds %d messages, want 0", from, n)
		}
	}
	t.Run("deleted before the move", func(t *testing.T) {
		_, ch, from, to, c := setup(t)
		d := receive(t, c, 10*time.Second)
		if err := c.Settle(ctxT(t), d, move(to, d)); err != nil {
			t.Fatal(err)
		}
		landed(t, c, ch, from, to)
	})
	t.Run("deleted before the commit", func(t *testing.T) {
		_, ch, from, to, c := setup(t)
		d := receive(t, c, 10*time.Second)
		txBeforeCommit = func() {
			if _, err := ch.QueueDelete(to, false, false, false); err != nil {
				t.Error(err)
			}
		}
		defer func() { txBeforeCommit = nil }()
		if err := c.Settle(ctxT(t), d, move(to, d)); err != nil {
			t.Fatal(err)
		}
		txBeforeCommit = nil
		landed(t, c, ch, from, to)
	})
	t.Run("declare=false", func(t *testing.T) {
		ctx := ctxT(t)
		_, ch, from, to, c := setup(t, WithoutDeclare())
		d := receive(t, c, 10*time.Second)
		err := c.Settle(ctx, d, move(to, d))
		var swe *transport.SettleWriteError
		if !errors.As(err, &swe) || !errors.Is(err, ErrUnroutable) || swe.Queue != to {
			t.Fatalf("Settle = %v, want a SettleWriteError for %s wrapping ErrUnroutable", err, to)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
			t.Fatal(err)
		}
		_ = c.Close(ctx)
		if n := queueCount(t, ch, from); n != 1 {
			t.Fatalf("%s holds %d messages, want the 1 not moved", from, n)
		}
	})
}
