package sqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

const (
	maxBatch  = 10                     // messages of one ReceiveMessage, entries of one ChangeMessageVisibilityBatch
	idlePause = 250 * time.Millisecond // a short-polling consumer's (wait_time=0) pause after an empty receive
	// receiveGrace is how much longer than its wait a ReceiveMessage may take before it
	// is made again (on a fresh connection), and settleCallTimeout bounds each call of a
	// settlement (a send, a delete, a visibility change), so that a consumer whose
	// connection went silent resumes within issue 38's 10 s where the SDK alone would
	// wait about a minute (docs/transports/sqs.md, "Dead connections", says why these).
	receiveGrace      = 5 * time.Second
	settleCallTimeout = 4 * time.Second
)

// Consume opens a consumer on queue, creating the queue when it does not exist (see
// [WithCreateQueues]). The consumer is the kit's ([driverkit.Consumer]) on SQS's
// primitives: ReceiveMessage, DeleteMessage, visibility changes and a heartbeat that
// keeps held messages invisible.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if t.consumers.Closed() {
		return nil, transport.ErrClosed
	}
	qurl, err := t.QueueURL(ctx, queue)
	if err != nil {
		return nil, err
	}
	c := &consumer{t: t, queue: queue, vis: t.visibility, askVis: int32(t.visibility / time.Second)}
	if c.vis == 0 {
		n, err := t.queueNumbers(ctx, qurl, types.QueueAttributeNameVisibilityTimeout)
		if err != nil {
			return nil, fmt.Errorf("sqs: visibility timeout of %q: %w", queue, err)
		}
		c.vis = time.Duration(max(n[0], 0)) * time.Second
	}
	c.url.Store(&qurl)
	c.life, c.end = context.WithCancel(context.Background())
	c.polls.Poll = c.receive
	// PipelineAcks: a worker does not wait for DeleteMessage's answer, as it waited for
	// nothing before the kit (a poller of the driver's own received meanwhile).
	k, err := driverkit.New[*held](c, driverkit.Config{
		Broker: "sqs", Queue: queue, Logger: t.common.Logger, Group: &t.consumers,
		HandOff: true, MaxBatch: maxBatch, PipelineAcks: true,
	}, opts)
	if err != nil {
		c.end()
		return nil, err
	}
	c.kit = k
	if c.vis > 0 {
		c.beat.Go(c.heartbeat)
	}
	return k, nil
}

// consumer is SQS's side of one consumer: the primitives the kit drives.
type consumer struct {
	t      *Transport
	queue  string
	url    atomic.Pointer[string] // looked up again when the queue vanished
	vis    time.Duration          // visibility timeout the heartbeat keeps up; 0: none
	askVis int32                  // VisibilityTimeout asked of ReceiveMessage; 0: the queue's
	kit    *driverkit.Consumer[*held]
	life   context.Context // ends in Close: bounds the polls and the heartbeat's calls
	end    context.CancelFunc
	beat   sync.WaitGroup
	polls  driverkit.Poller[*held] // ReceiveMessage calls, never cancelled for their caller
}

// held is one received message: what settling it and extending its visibility need.
type held struct {
	msg     *types.Message // until Decode
	receipt string
	msgID   string
	group   string

	extended time.Time   // last time its visibility was set; the heartbeat's alone
	rewound  atomic.Bool // given back: an extension racing it is undone
	deleted  atomic.Bool // an Ack is deleting it: an extension racing it may fail
}

// Receive stores up to len(into) messages received by a poll ([driverkit.Poller]: SQS may
// have handed a cancelled poll messages already).
func (c *consumer) Receive(ctx context.Context, into []*held) (int, error) {
	return c.polls.Receive(ctx, c.kit.Done(), into)
}

// receive makes a ReceiveMessage call for up to n messages, bounded by the long-poll
// wait plus receiveGrace (a connection that died without a reset).
func (c *consumer) receive(n int) (got []*held, _ error) {
	ctx, cancel := context.WithTimeout(c.life, time.Duration(c.t.waitTime)*time.Second+receiveGrace)
	defer cancel()
	out, err := c.t.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.queueURL()),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             c.t.waitTime,
		VisibilityTimeout:           c.askVis,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameMessageGroupId},
	})
	if err != nil {
		if isMissingQueue(err) {
			if u, rerr := c.t.freshURL(ctx, c.queue); rerr == nil {
				c.url.Store(&u)
			}
		}
		return nil, fmt.Errorf("sqs: receive from %q: %w", c.queue, err)
	}
	if out == nil {
		out = &awssqs.ReceiveMessageOutput{}
	}
	var extra []*held
	now := time.Now()
	for i := range out.Messages {
		m := &out.Messages[i]
		switch {
		case m.ReceiptHandle == nil || *m.ReceiptHandle == "":
			c.t.common.Logger.Warn("sqs: received a message without a receipt handle; skipped", "queue", c.queue, "message_id", aws.ToString(m.MessageId))
		case len(got) == n: // more than asked for: no slot holds it
			extra = append(extra, &held{receipt: *m.ReceiptHandle})
		default:
			got = append(got, &held{msg: m, receipt: *m.ReceiptHandle, msgID: aws.ToString(m.MessageId),
				group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)], extended: now})
		}
	}
	c.giveBackLogged(extra)
	if len(got) == 0 && c.t.waitTime == 0 {
		_ = driverkit.Sleep(c.life, idlePause) // short polling on an empty queue: do not spin on the broker
	}
	return got, nil
}

func (c *consumer) queueURL() string { return *c.url.Load() }

// IsRetryable makes the kit retry every failed receive until the consumer closes.
func (c *consumer) IsRetryable(err error) bool { return !errors.Is(err, transport.ErrClosed) }

// Decode reads the delivery from the received message.
func (c *consumer) Decode(h *held, d *transport.Delivery) {
	readDelivery(d, h.msg)
	h.msg = nil
}

// Write sends the settle writes in order. On a FIFO queue each write's deduplication id
// is seeded by the consumed message and the write's position, and a write without a
// group inherits the consumed message's.
func (c *consumer) Write(ctx context.Context, h *held, ws []*transport.Message) (driverkit.Confirm, error) {
	i := 0
	return nil, driverkit.SendAll(ctx, ws, func(ctx context.Context, w *transport.Message) error {
		seed := h.msgID + "\x00" + strconv.Itoa(i)
		i++
		ctx, cancel := context.WithTimeout(ctx, settleCallTimeout)
		defer cancel()
		return c.t.send(ctx, w, seed, h.group, c.t.withURL)
	})
}

// Ack deletes the message.
func (c *consumer) Ack(ctx context.Context, h *held) error {
	h.deleted.Store(true)
	ctx, cancel := context.WithTimeout(ctx, settleCallTimeout)
	defer cancel()
	if _, err := c.t.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{
		QueueUrl:      aws.String(c.queueURL()),
		ReceiptHandle: aws.String(h.receipt),
	}); err != nil {
		return fmt.Errorf("sqs: delete from %q: %w", c.queue, err)
	}
	return nil
}

// HandOff sends nothing: the message returns when its visibility timeout lapses, and
// the queue's RedrivePolicy counts the receives.
func (c *consumer) HandOff(context.Context, *held) error { return nil }

// GiveBack makes the messages visible again at once (a visibility timeout of 0).
func (c *consumer) GiveBack(ctx context.Context, hs []*held, _ driverkit.Reason) error {
	for _, h := range hs {
		h.rewound.Store(true)
	}
	ctx, cancel := context.WithTimeout(ctx, settleCallTimeout)
	defer cancel()
	var err error
	if len(hs) == 1 {
		_, err = c.t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(c.queueURL()), ReceiptHandle: aws.String(hs[0].receipt), VisibilityTimeout: 0})
	} else {
		for batch := range slices.Chunk(hs, maxBatch) {
			err = errors.Join(err, c.t.setVisibility(ctx, c.queueURL(), receipts(batch), 0, nil))
		}
	}
	if err != nil {
		return fmt.Errorf("sqs: give back %d messages on %q (they return when their visibility timeout lapses): %w", len(hs), c.queue, err)
	}
	return nil
}

// giveBackLogged gives hs back outside a settlement, logging a failure.
func (c *consumer) giveBackLogged(hs []*held) {
	if len(hs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.GiveBack(ctx, hs, driverkit.Closing); err != nil {
		c.t.common.Logger.Warn(err.Error(), "queue", c.queue)
	}
}

func receipts(hs []*held) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.receipt
	}
	return out
}

// heartbeat extends the visibility of every held message before it lapses: those
// handed out, being settled, or waiting to be handed out.
func (c *consumer) heartbeat() {
	every := max(c.vis/3, 200*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-c.kit.Done():
			return
		}
		now := time.Now()
		due := func(h *held) bool { return now.Sub(h.extended) >= every }
		hs := append(c.kit.Unsettled(due), c.polls.Waiting(due)...)
		for batch := range slices.Chunk(hs, maxBatch) {
			c.extend(batch, every)
		}
	}
}

// extend sets the visibility of up to ten held messages, in one call bounded by timeout.
func (c *consumer) extend(hs []*held, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(c.life, timeout)
	// An extension that raced the message's own settlement may be refused: no news.
	err := c.t.setVisibility(ctx, c.queueURL(), receipts(hs), int32(c.vis/time.Second),
		func(i int) bool { return hs[i].deleted.Load() || hs[i].rewound.Load() })
	cancel()
	if err != nil && c.life.Err() == nil {
		c.t.common.Logger.Warn("sqs: could not extend the visibility of held messages; they may be redelivered", "queue", c.queue, "count", len(hs), "error", err)
	}
	// A give-back that ran meanwhile may have reached SQS first: undo the extension.
	var rewound []*held
	now := time.Now()
	for _, h := range hs {
		if h.rewound.Load() {
			rewound = append(rewound, h)
		}
		if err == nil {
			h.extended = now
		}
	}
	c.giveBackLogged(rewound)
}

// Close waits for a poll in flight (at most the wait time), stops the heartbeat and
// gives back what the polls received and nobody took.
func (c *consumer) Close(ctx context.Context) error {
	c.polls.Wait(ctx)
	c.end() // a poll still in flight returns now
	c.beat.Wait()
	if back := c.polls.Drain(); len(back) > 0 {
		return c.GiveBack(ctx, back, driverkit.Closing)
	}
	return nil
}
