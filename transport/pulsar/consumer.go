package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// ErrForeignDelivery is returned by Settle for a delivery another consumer handed out.
var ErrForeignDelivery = driverkit.ErrForeign

// Consume subscribes to the topic queue with the transport's subscription. Messages
// published before the subscription first existed are received too (the initial
// position is the earliest message). The receive loop, the settlements and Close are
// the kit's ([driverkit.Consumer]); this file is Pulsar's side of them.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("pulsar: Consume needs a queue")
	}
	if t.consumers.Closed() {
		return nil, transport.ErrClosed
	}
	st, _ := t.opts.subType.native()
	co := pc.ConsumerOptions{
		Topic:                       queue,
		SubscriptionName:            t.opts.subscription,
		Type:                        st,
		SubscriptionInitialPosition: pc.SubscriptionPositionEarliest,
		ReceiverQueueSize:           t.opts.receiverQueue,
		NackRedeliveryDelay:         t.opts.nackDelay,
		// An Ack returns once the broker has it: without this the client groups acks
		// for up to 100ms, and Close (or a crash) can lose the last ones, so a message
		// whose settle writes were made comes back (a redrive's move, a retry twice).
		// The consumer sends the acks made at once in one request (acker).
		AckWithResponse:   true,
		BackOffPolicyFunc: newReconnectBackoff,
	}
	if t.opts.consumerOptions != nil {
		t.opts.consumerOptions(&co)
	}
	type result struct {
		c   pc.Consumer
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := t.client.Subscribe(co)
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, fmt.Errorf("pulsar: subscribe %q to %q: %w", t.opts.subscription, queue, r.err)
	}
	// A Transactional consumer (a DLQ redrive) does not pipeline: without a Pulsar
	// transaction here, settling before Settle returns keeps a kill's duplicates to the
	// one delivery in hand (the kit ignores Pipeline for it).
	c := &consumer{t: t, queue: queue, pc: r.c, ch: r.c.Chan(), awaited: !t.opts.pipeline || opts.Transactional}
	c.acks.pc = r.c
	k, err := driverkit.New[pc.Message](c, driverkit.Config{
		Broker:            "pulsar",
		Queue:             queue,
		Logger:            t.log,
		Group:             &t.consumers,
		Pipeline:          t.opts.pipeline,
		PipelineAcks:      t.opts.pipeline,
		ConfirmTimeout:    t.opts.sendTimeout,
		ConcurrentReceive: true,
	}, opts)
	if err != nil {
		r.c.Close()
		return nil, err
	}
	c.kit = k
	return k, nil
}

// consumer is Pulsar's side of one consumer: a subscription's consumer of the topic.
// The Pulsar client reconnects it by itself, so a receive never fails but for Close.
type consumer struct {
	t       *Transport
	queue   string
	pc      pc.Consumer
	ch      <-chan pc.ConsumerMessage // pc.Chan(): the receiver queue
	acks    acker
	awaited bool // the kit confirms each settle write before Settle returns
	kit     *driverkit.Consumer[pc.Message]
}

// Receive takes the next message of the receiver queue.
func (c *consumer) Receive(ctx context.Context, into []pc.Message) (int, error) {
	select {
	case cm, ok := <-c.ch:
		if !ok {
			return 0, transport.ErrClosed
		}
		into[0] = cm.Message
		return 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-c.kit.Done():
		return 0, transport.ErrClosed
	}
}

// IsRetryable reports false: the client reconnects by itself, and Receive fails only
// when the consumer closes.
func (c *consumer) IsRetryable(error) bool { return false }

// Decode fills d from a received message.
func (c *consumer) Decode(m pc.Message, d *transport.Delivery) { deliveryFields(d, m) }

// Ack acknowledges m and waits for the broker's answer; the acknowledgements made at
// once go in one request.
func (c *consumer) Ack(ctx context.Context, m pc.Message) error {
	if err := c.acks.ack(ctx, m.ID()); err != nil {
		// The broker redelivers what it never saw acknowledged.
		return fmt.Errorf("pulsar: ack on %q: %w", c.queue, err)
	}
	return nil
}

// GiveBack negatively acknowledges the messages: the broker delivers them again after
// the nack redelivery delay, with their redelivery count one higher. Closing needs
// nothing: closing the Pulsar consumer returns every unacknowledged message to the
// subscription.
func (c *consumer) GiveBack(_ context.Context, ms []pc.Message, why driverkit.Reason) error {
	if why != driverkit.Closing {
		for _, m := range ms {
			c.pc.Nack(m)
		}
	}
	return nil
}

// Write makes the settle writes of an Ack. Awaited (pipeline_settles=0, or a
// Transactional consumer) it sends them in order and waits for each receipt, stopping
// at the first that fails (those before it stay made). Pipelined, it checks every
// write and finds its producer before it hands any over, so an error it returns means
// nothing was written; then it hands them all to their producers (SendAsync) and
// returns the wait for their receipts.
func (c *consumer) Write(ctx context.Context, _ pc.Message, ws []*transport.Message) (driverkit.Confirm, error) {
	t := c.t
	if c.awaited {
		return nil, driverkit.SendAll(ctx, ws, t.sendSettle)
	}
	pms := make([]*pc.ProducerMessage, len(ws))
	ps := make([]pc.Producer, len(ws))
	for i, m := range ws {
		err := t.settleFault(m)
		if err == nil {
			pms[i], err = t.check(m)
		}
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
	for i, m := range ws {
		p, err := t.producer(ctx, m.Queue)
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		ps[i] = p
	}
	r := newReceipts(len(ws))
	for i, m := range ws {
		t.sendAsync(ctx, ps[i], m.Queue, pms[i], r, i)
	}
	return func(ctx context.Context) error {
		for i, err := range r.wait(ctx) {
			if err != nil {
				return &transport.SettleWriteError{Queue: ws[i].Queue, Err: err}
			}
		}
		return nil
	}, nil
}

// Close closes the Pulsar consumer, bounded by ctx: the broker gives what it handed out
// and was not acknowledged (the receiver queue too) to the subscription's other
// consumers.
func (c *consumer) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.pc.Close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pulsar: closing the subscription's consumer of %q: %w", c.queue, ctx.Err())
	}
}

// acker sends a consumer's acknowledgements: those made while a request is on its way
// go together in the next one (AckIDList, one round trip), so the acknowledgements of
// many workers and pipelined settlements do not wait in line, one round trip each, as
// the client's own acknowledgements with response do.
type acker struct {
	pc      pc.Consumer
	mu      sync.Mutex
	next    *ackBatch // filling while a request is on its way
	sending bool      // a goroutine sends the batches
}

// ackBatch is the acknowledgements of one request; done is closed when it answered.
type ackBatch struct {
	ids  []pc.MessageID
	done chan struct{}
	err  error
}

// ack acknowledges id and waits, until ctx ends, for the broker's answer.
func (a *acker) ack(ctx context.Context, id pc.MessageID) error {
	a.mu.Lock()
	b := a.next
	if b == nil {
		b = &ackBatch{done: make(chan struct{})}
		a.next = b
	}
	b.ids = append(b.ids, id)
	if !a.sending {
		a.sending = true
		go a.send()
	}
	a.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var each pc.AckError
	if errors.As(b.err, &each) {
		return each[id] // nil: this one was acknowledged
	}
	return b.err
}

// send sends the batches, one request at a time, until none is left.
func (a *acker) send() {
	for {
		a.mu.Lock()
		b := a.next
		a.next = nil
		if b == nil {
			a.sending = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		if len(b.ids) == 1 {
			b.err = a.pc.AckID(b.ids[0]) // one ack: the client's own request costs less
		} else {
			b.err = a.pc.AckIDList(b.ids)
		}
		close(b.done)
	}
}
