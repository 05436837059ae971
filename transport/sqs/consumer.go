package sqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/transport"
)

// maxBatch is the most messages one ReceiveMessage returns, and the most entries of one
// ChangeMessageVisibilityBatch.
const maxBatch = 10

// idlePause is how long a short-polling consumer (wait_time=0) waits after an empty
// receive.
const idlePause = 250 * time.Millisecond

// held is the SQS side of one received message: what settling it and extending its
// visibility need. No lock guards it across a call to SQS; the consumer's ledger says
// whether it is still open.
type held struct {
	receipt string
	msgID   string
	group   string

	extended time.Time   // last time its visibility was set; the heartbeat's alone
	rewound  atomic.Bool // a Rewind made it visible: an extension racing it is undone
	deleted  atomic.Bool // an Ack is deleting it: an extension racing it may fail
}

type consumer struct {
	t        *Transport
	queue    string
	url      atomic.Pointer[string] // re-resolved when the queue vanished
	vis      time.Duration          // visibility timeout the heartbeat keeps up; 0: none
	askVis   int32                  // VisibilityTimeout asked of ReceiveMessage; 0: the queue's
	book     *ledger.Ledger[*held]  // received and not settled, buffered or handed out
	ready    chan *transport.Delivery
	wake     chan struct{}   // Receive took a delivery: the poller re-checks the buffer
	ctx      context.Context // cancelled by Close; bounds the poller's and heartbeat's calls
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closeOne sync.Once
}

// Consume opens a consumer on queue. The queue is created when it does not exist (see
// [WithCreateQueues]). A poller receives batches of up to ten messages in the
// background, holding at most opts.Prefetch unsettled.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if t.isClosed() {
		return nil, transport.ErrClosed
	}
	qurl, err := t.QueueURL(ctx, queue)
	if err != nil {
		return nil, err
	}
	vis := t.visibility
	var ask int32
	if vis > 0 {
		ask = int32((vis + time.Second - 1) / time.Second)
		vis = time.Duration(ask) * time.Second
	} else {
		out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(qurl),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout},
		})
		if err != nil {
			return nil, fmt.Errorf("sqs: visibility timeout of %q: %w", queue, err)
		}
		if out != nil {
			if n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)]); err == nil && n > 0 {
				vis = time.Duration(n) * time.Second
			}
		}
	}
	prefetch := max(opts.Prefetch, 1)
	cctx, cancel := context.WithCancel(context.Background())
	c := &consumer{
		t:      t,
		queue:  queue,
		vis:    vis,
		askVis: ask,
		book: ledger.New[*held](ledger.Config{
			Broker:   "sqs",
			Queue:    queue,
			Prefetch: prefetch,
			Outcomes: []transport.Outcome{transport.Ack, transport.Rewind, transport.HandOff},
			Logger:   t.log,
		}),
		ready:  make(chan *transport.Delivery, prefetch),
		wake:   make(chan struct{}, 1),
		ctx:    cctx,
		cancel: cancel,
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		cancel()
		return nil, transport.ErrClosed
	}
	t.consumers[c] = struct{}{}
	t.mu.Unlock()
	c.url.Store(&qurl)
	c.wg.Add(1)
	go c.poll()
	if vis > 0 {
		c.wg.Add(1)
		go c.heartbeat()
	}
	return c, nil
}

// Receive returns the next delivery, waiting until one is received or ctx ends.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	select {
	case <-c.book.Done():
		return nil, transport.ErrClosed
	default:
	}
	select {
	case d := <-c.ready:
		select {
		case c.wake <- struct{}{}:
		default:
		}
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.book.Done():
		return nil, transport.ErrClosed
	}
}

// poll receives batches while there is room for more unsettled messages. Every message
// received holds a prefetch slot from then on, buffered or handed out.
func (c *consumer) poll() {
	defer c.wg.Done()
	backoff := time.Duration(0)
	for {
		// One slot to start (after the ledger's backoff while settlements fail), then
		// as many more as are free, up to a batch.
		if c.book.Acquire(c.ctx) != nil {
			return
		}
		n, ok := c.gather()
		if !ok {
			return
		}
		// Each call is bounded (the long-poll wait plus receiveGrace), so a request on a
		// connection that died without a reset fails, is logged and is made again
		// instead of stalling the poller: the messages such a call took come back after
		// their visibility timeout.
		rctx, cancel := context.WithTimeout(c.ctx, time.Duration(c.t.waitTime)*time.Second+receiveGrace)
		out, err := c.t.client.ReceiveMessage(rctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL()),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             c.t.waitTime,
			VisibilityTimeout:           c.askVis,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameMessageGroupId},
		})
		cancel()
		used, got := 0, 0
		if err == nil && out != nil {
			backoff = 0
			got = len(out.Messages)
			var extra []*held
			for i := range out.Messages {
				m := &out.Messages[i]
				if used == n {
					// More than asked for: no slot to hold it, so give it back.
					if m.ReceiptHandle != nil {
						extra = append(extra, &held{receipt: *m.ReceiptHandle})
					}
					continue
				}
				if c.accept(m) {
					used++
				}
			}
			c.giveBack(extra)
		}
		for range n - used {
			c.book.Unacquire()
		}
		if err == nil && got == 0 && c.t.waitTime == 0 {
			// Short polling on an empty queue: do not spin on the broker.
			if !c.sleep(idlePause) {
				return
			}
		}
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			if isMissingQueue(err) {
				// Deleted under us (or an emulator restarted): look it up again,
				// which creates it when creating is on.
				c.t.forgetURL(c.queue)
				if u, rerr := c.t.QueueURL(c.ctx, c.queue); rerr == nil {
					c.url.Store(&u)
				}
			}
			// At most 2 s: the poller resumes within about 2 s of the endpoint coming
			// back (the fault suite, issue 16, measured 8.6 s after a restart at 10 s).
			backoff = min(max(2*backoff, 100*time.Millisecond), 2*time.Second)
			c.t.log.Warn("sqs: receive failed; retrying", "queue", c.queue, "retry_in", backoff, "error", err)
			if !c.sleep(backoff) {
				return
			}
		}
	}
}

// receiveGrace is how much longer than its long-poll wait a ReceiveMessage call may
// take before it is given up and made again.
const receiveGrace = 20 * time.Second

// sleep waits d, reporting false when the consumer closed first.
func (c *consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.book.Done():
		return false
	}
}

// gather takes more slots for the next batch, on top of the one acquired: every free
// one at once, and, while the workers still have at least half a batch buffered, waits
// for them to take more, so a busy consumer receives full batches instead of one
// message per acknowledgement (a worker settles, then comes back to Receive). It returns
// the slots held, or false when the consumer closed.
func (c *consumer) gather() (int, bool) {
	n := 1
	target := min(c.book.Prefetch(), maxBatch)
	for n < target {
		if c.book.Room() > 0 {
			if c.book.Acquire(c.ctx) != nil {
				return 0, false
			}
			n++
			continue
		}
		if len(c.ready) <= target/2 {
			break
		}
		select {
		case <-c.wake: // a worker took a buffered delivery: look again
		case <-c.book.Done():
			return 0, false
		}
	}
	return n, true
}

func (c *consumer) queueURL() string { return *c.url.Load() }

// accept turns a received message into a delivery on the ready channel, under a slot
// the poller acquired. A message without a receipt handle cannot be settled and is
// skipped.
func (c *consumer) accept(msg *types.Message) bool {
	if msg.ReceiptHandle == nil || *msg.ReceiptHandle == "" {
		c.t.log.Warn("sqs: received a message without a receipt handle; skipped", "queue", c.queue, "message_id", aws.ToString(msg.MessageId))
		return false
	}
	h := &held{
		receipt:  *msg.ReceiptHandle,
		msgID:    aws.ToString(msg.MessageId),
		group:    msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
		extended: time.Now(),
	}
	e, err := c.book.Hand(h)
	if err != nil {
		// Closed meanwhile.
		c.giveBack([]*held{h})
		return false
	}
	d := &transport.Delivery{Queue: c.queue, Handle: e}
	readDelivery(d, msg)
	c.ready <- d // never blocks: a slot is held for every message in the channel
	return true
}

// heartbeat extends the visibility of every held message before it lapses, ten
// messages a call, the ones being settled too: a slow settle write must not let the
// message go back to the queue under it.
func (c *consumer) heartbeat() {
	defer c.wg.Done()
	every := max(c.vis/3, 200*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-c.book.Done():
			return
		}
		now := time.Now()
		due := c.book.Unsettled(func(h *held) bool { return now.Sub(h.extended) >= every })
		for len(due) > 0 {
			n := min(len(due), maxBatch)
			hs := make([]*held, n)
			for i, e := range due[:n] {
				hs[i] = e.Value
			}
			c.extend(hs, every)
			due = due[n:]
		}
	}
}

// extend sets the visibility of up to ten held messages to the visibility timeout, in
// one call bounded by timeout.
func (c *consumer) extend(hs []*held, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	out, err := c.setVisibility(ctx, hs, int32(c.vis/time.Second))
	cancel()
	// A Rewind that ran meanwhile may have reached SQS before this extension: make
	// those messages visible again, so a rewound message is never held back.
	var rewound []*held
	for _, h := range hs {
		if h.rewound.Load() {
			rewound = append(rewound, h)
		}
	}
	c.giveBack(rewound)
	if err == nil {
		// An extension that raced the message's own settle may fail; that is no news.
		var failed []types.BatchResultErrorEntry
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err != nil || i < 0 || i >= len(hs) || !hs[i].deleted.Load() && !hs[i].rewound.Load() {
				failed = append(failed, f)
			}
		}
		if len(failed) > 0 {
			err = fmt.Errorf("%d of %d refused: %s: %s", len(failed), len(hs), aws.ToString(failed[0].Code), aws.ToString(failed[0].Message))
		}
	}
	if err != nil && c.ctx.Err() == nil {
		c.t.log.Warn("sqs: could not extend the visibility of held messages; they may be redelivered", "queue", c.queue, "count", len(hs), "error", err)
	}
	if out == nil {
		return
	}
	now := time.Now()
	for _, s := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(hs) {
			hs[i].extended = now
		}
	}
}

// setVisibility sets the visibility of up to ten messages in one
// ChangeMessageVisibilityBatch call; each entry's id is its index in hs. The output is
// never nil when the error is.
func (c *consumer) setVisibility(ctx context.Context, hs []*held, secs int32) (*awssqs.ChangeMessageVisibilityBatchOutput, error) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(hs))
	for i, h := range hs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			ReceiptHandle:     aws.String(h.receipt),
			VisibilityTimeout: secs,
		}
	}
	out, err := c.t.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(c.queueURL()),
		Entries:  entries,
	})
	if err == nil && out == nil {
		out = &awssqs.ChangeMessageVisibilityBatchOutput{}
	}
	return out, err
}

// Settle finishes a delivery: Ack sends every write, then deletes; Rewind makes the
// message visible at once; HandOff leaves it for the queue's RedrivePolicy.
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	return c.book.Finish(e, s, c.settle(ctx, e.Value, s))
}

func (c *consumer) settle(ctx context.Context, h *held, s transport.Settlement) error {
	switch s.Outcome {
	case transport.Ack:
		i := 0
		err := ledger.SendAll(ctx, s.Writes, func(ctx context.Context, w *transport.Message) error {
			seed := h.msgID + "\x00" + strconv.Itoa(i)
			i++
			return c.t.send(ctx, w, seed, h.group)
		})
		if err != nil {
			return err
		}
		h.deleted.Store(true)
		if _, err := c.t.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{
			QueueUrl:      aws.String(c.queueURL()),
			ReceiptHandle: aws.String(h.receipt),
		}); err != nil {
			return fmt.Errorf("sqs: delete from %q: %w", c.queue, err)
		}
	case transport.Rewind:
		h.rewound.Store(true)
		if _, err := c.t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl:          aws.String(c.queueURL()),
			ReceiptHandle:     aws.String(h.receipt),
			VisibilityTimeout: 0,
		}); err != nil {
			// No heartbeat extends it any more, so the message still comes back when
			// its visibility timeout lapses.
			return fmt.Errorf("sqs: rewind on %q (the message returns when its visibility timeout lapses): %w", c.queue, err)
		}
	case transport.HandOff:
		// Nothing on the wire: visibility expiry redelivers it and the RedrivePolicy
		// counts the receives.
	}
	return nil
}

// giveBack makes messages visible again at once, in batches of ten.
func (c *consumer) giveBack(hs []*held) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(hs) > 0 {
		n := min(len(hs), maxBatch)
		if _, err := c.setVisibility(ctx, hs[:n], 0); err != nil {
			c.t.log.Warn("sqs: could not give messages back; they return when their visibility timeout lapses", "queue", c.queue, "count", n, "error", err)
		}
		hs = hs[n:]
	}
}

// Close stops the poller and the heartbeat and makes every unsettled message visible
// again, so another consumer receives it at once. It waits for a long poll in progress
// (at most the wait time) unless ctx ends first; what that poll receives is given back
// too.
func (c *consumer) Close(ctx context.Context) error {
	c.closeOne.Do(func() {
		c.giveBack(c.book.Close())
		// Let a long poll in progress finish (at most the wait time) rather than cancel
		// it: SQS may already have handed it messages, which a cancelled call would leave
		// invisible until their visibility timeout. The poller gives them back.
		waited := make(chan struct{})
		go func() { c.wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
		}
		c.cancel()
		c.t.mu.Lock()
		delete(c.t.consumers, c)
		c.t.mu.Unlock()
	})
	return nil
}
