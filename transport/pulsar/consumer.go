package pulsar

import (
	"context"
	"errors"
	"fmt"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// ErrForeignDelivery is returned by Settle for a delivery another consumer handed out.
var ErrForeignDelivery = driverkit.ErrForeign

// Consume subscribes to the topic queue with the transport's subscription, from the
// earliest message. The consumer is the kit's ([driverkit.Consumer]) on Pulsar's
// primitives.
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
		// An Ack returns once the broker has it: a grouped ack can be lost with Close or a
		// crash, and its message's settle writes made again (ackIDs groups them instead).
		AckWithResponse:   true,
		BackOffPolicyFunc: newReconnectBackoff,
	}
	if t.opts.consumerOptions != nil {
		t.opts.consumerOptions(&co)
	}
	sub, err := driverkit.Await(ctx, func() (pc.Consumer, error) { return t.client.Subscribe(co) }, pc.Consumer.Close)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("pulsar: subscribe %q to %q: %w", t.opts.subscription, queue, err)
	}
	// A Transactional consumer (a DLQ redrive) does not pipeline (the kit ignores Pipeline).
	c := &consumer{t: t, queue: queue, pc: sub, ch: sub.Chan(), awaited: !t.opts.pipeline || opts.Transactional}
	c.acks.Send = c.ackIDs
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
		sub.Close()
		return nil, err
	}
	c.kit = k
	return k, nil
}

// consumer is Pulsar's side of one consumer: a subscription's consumer of the topic.
type consumer struct {
	t       *Transport
	queue   string
	pc      pc.Consumer
	ch      <-chan pc.ConsumerMessage         // pc.Chan(): the receiver queue
	acks    driverkit.Coalescer[pc.MessageID] // the acknowledgements made at once go in one request
	awaited bool                              // the kit confirms each settle write before Settle returns
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
	if err := c.acks.Do(ctx, m.ID()); err != nil {
		// The broker redelivers what it never saw acknowledged.
		return fmt.Errorf("pulsar: ack on %q: %w", c.queue, err)
	}
	return nil
}

// GiveBack negatively acknowledges the messages (redelivered after the nack delay);
// closing the Pulsar consumer gives back the rest.
func (c *consumer) GiveBack(_ context.Context, ms []pc.Message, why driverkit.Reason) error {
	if why != driverkit.Closing {
		for _, m := range ms {
			c.pc.Nack(m)
		}
	}
	return nil
}

// Write makes the settle writes of an Ack: awaited, in order, each receipt waited for;
// pipelined, every write checked and its producer found before any is handed over
// (SendAsync), returning the wait for their receipts.
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
		if err == nil {
			ps[i], err = t.producer(ctx, m.Queue)
		}
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
	r := driverkit.NewReceipts(len(ws))
	for i, m := range ws {
		t.sendAsync(ctx, ps[i], m.Queue, pms[i], r, i)
	}
	return func(ctx context.Context) error {
		for i, err := range r.Wait(ctx) {
			if err != nil {
				return &transport.SettleWriteError{Queue: ws[i].Queue, Err: err}
			}
		}
		return nil
	}, nil
}

// Close closes the Pulsar consumer, bounded by ctx: the broker gives what was not
// acknowledged to the subscription's other consumers.
func (c *consumer) Close(ctx context.Context) error {
	if _, err := driverkit.Await(ctx, func() (any, error) { c.pc.Close(); return nil, nil }, nil); err != nil {
		return fmt.Errorf("pulsar: closing the subscription's consumer of %q: %w", c.queue, err)
	}
	return nil
}

// ackIDs acknowledges ids in one request (one alone as AckID), for the Coalescer.
func (c *consumer) ackIDs(ids []pc.MessageID) []error {
	if len(ids) == 1 {
		return []error{c.pc.AckID(ids[0])}
	}
	err := c.pc.AckIDList(ids)
	var each pc.AckError
	if !errors.As(err, &each) {
		return []error{err}
	}
	errs := make([]error, len(ids))
	for i, id := range ids {
		errs[i] = each[id] // nil: this one was acknowledged
	}
	return errs
}
