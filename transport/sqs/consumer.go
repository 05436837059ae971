package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
)

// maxBatch is the most messages one ReceiveMessage returns.
const maxBatch = 10

// idlePause is how long a short-polling consumer (wait_time=0) waits after an empty
// receive.
const idlePause = 250 * time.Millisecond

// held is the bookkeeping of one received message (Delivery.Handle).
type held struct {
	c       *consumer
	receipt string
	msgID   string
	group   string

	mu       sync.Mutex // serialises settling and heartbeats of this message
	settled  bool
	extended time.Time // last time its visibility was set
}

type consumer struct {
	t        *Transport
	queue    string
	url      atomic.Pointer[string] // re-resolved when the queue vanished
	vis      time.Duration          // visibility timeout the heartbeat keeps up; 0: none
	askVis   int32                  // VisibilityTimeout asked of ReceiveMessage; 0: the queue's
	credits  chan struct{}          // one per unsettled message (buffered or handed out)
	ready    chan *transport.Delivery
	wake     chan struct{} // Receive took a delivery: the poller re-checks the buffer
	done     chan struct{}
	ctx      context.Context // cancelled by Close; bounds the poller's calls
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closeOne sync.Once

	mu     sync.Mutex
	closed bool
	live   map[*held]struct{} // received and not settled
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
		t:       t,
		queue:   queue,
		vis:     vis,
		askVis:  ask,
		credits: make(chan struct{}, prefetch),
		ready:   make(chan *transport.Delivery, prefetch),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		ctx:     cctx,
		cancel:  cancel,
		live:    map[*held]struct{}{},
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
	case <-c.done:
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
	case <-c.done:
		return nil, transport.ErrClosed
	}
}

// poll receives batches while there is room for more unsettled messages.
func (c *consumer) poll() {
	defer c.wg.Done()
	backoff := time.Duration(0)
	for {
		select {
		case <-c.done:
			return
		default:
		}
		// One credit to start, then as many more as are free, up to a batch.
		select {
		case c.credits <- struct{}{}:
		case <-c.done:
			return
		}
		n := 1
		if !c.gather(&n) {
			return
		}
		out, err := c.t.client.ReceiveMessage(c.ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL()),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             c.t.waitTime,
			VisibilityTimeout:           c.askVis,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameMessageGroupId},
		})
		used, got := 0, 0
		if err == nil && out != nil {
			backoff = 0
			got = len(out.Messages)
			var extra []*held
			for i := range out.Messages {
				m := &out.Messages[i]
				if used == n {
					// More than asked for: no credit to hold it, so give it back.
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
			<-c.credits
		}
		if err == nil && got == 0 && c.t.waitTime == 0 {
			// Short polling on an empty queue: do not spin on the broker.
			select {
			case <-time.After(idlePause):
			case <-c.done:
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
			backoff = min(max(2*backoff, 100*time.Millisecond), 10*time.Second)
			c.t.log.Warn("sqs: receive failed; retrying", "queue", c.queue, "retry_in", backoff, "error", err)
			select {
			case <-time.After(backoff):
			case <-c.done:
				return
			}
		}
	}
}

// gather takes more credits for the next batch: every free one at once, and, while
// the workers still have deliveries buffered, waits for more, so a busy consumer
// receives full batches instead of one message per acknowledgement. It reports false
// when the consumer closed.
func (c *consumer) gather(n *int) bool {
	target := min(cap(c.credits), maxBatch)
	for *n < target {
		select {
		case c.credits <- struct{}{}:
			*n++
			continue
		default:
		}
		if len(c.ready) <= lowWater(target) {
			return true
		}
		select {
		case c.credits <- struct{}{}:
			*n++
		case <-c.wake:
		case <-c.done:
			for range *n {
				<-c.credits
			}
			return false
		}
	}
	return true
}

// lowWater is how few buffered deliveries make the poller receive at once.
func lowWater(target int) int { return target / 2 }

func (c *consumer) queueURL() string { return *c.url.Load() }

// accept turns a received message into a delivery on the ready channel. A message
// without a receipt handle cannot be settled and is skipped.
func (c *consumer) accept(msg *types.Message) bool {
	if msg.ReceiptHandle == nil || *msg.ReceiptHandle == "" {
		c.t.log.Warn("sqs: received a message without a receipt handle; skipped", "queue", c.queue, "message_id", aws.ToString(msg.MessageId))
		return false
	}
	h := &held{
		c:        c,
		receipt:  *msg.ReceiptHandle,
		msgID:    aws.ToString(msg.MessageId),
		group:    msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
		extended: time.Now(),
	}
	d := &transport.Delivery{Queue: c.queue, Handle: h}
	readDelivery(d, msg)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.giveBack([]*held{h})
		return false
	}
	c.live[h] = struct{}{}
	c.mu.Unlock()
	c.ready <- d // never blocks: a credit is held for every message in the channel
	return true
}

// heartbeat extends the visibility of every held message before it lapses.
func (c *consumer) heartbeat() {
	defer c.wg.Done()
	every := max(c.vis/3, 200*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	secs := int32(c.vis / time.Second)
	for {
		select {
		case <-tick.C:
		case <-c.done:
			return
		}
		now := time.Now()
		c.mu.Lock()
		due := make([]*held, 0, len(c.live))
		for h := range c.live {
			if now.Sub(h.extended) >= every {
				due = append(due, h)
			}
		}
		c.mu.Unlock()
		for _, h := range due {
			h.mu.Lock()
			if !h.settled {
				_, err := c.t.client.ChangeMessageVisibility(c.ctx, &awssqs.ChangeMessageVisibilityInput{
					QueueUrl:          aws.String(c.queueURL()),
					ReceiptHandle:     aws.String(h.receipt),
					VisibilityTimeout: secs,
				})
				if err == nil {
					h.extended = time.Now()
				} else if c.ctx.Err() == nil {
					c.t.log.Warn("sqs: could not extend a held message's visibility; it may be redelivered", "queue", c.queue, "message_id", h.msgID, "error", err)
				}
			}
			h.mu.Unlock()
		}
	}
}

// Settle finishes a delivery: Ack sends every write, then deletes; Rewind makes the
// message visible at once; HandOff leaves it for the queue's RedrivePolicy.
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	if d == nil {
		return errors.New("sqs: nil delivery")
	}
	h, ok := d.Handle.(*held)
	if !ok || h.c != c {
		return errors.New("sqs: delivery does not belong to this consumer")
	}
	if len(s.Writes) > 0 && s.Outcome != transport.Ack {
		return fmt.Errorf("sqs: settle writes are only allowed with ack, not %s", s.Outcome)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settled {
		return transport.ErrAlreadySettled
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return transport.ErrClosed
	}
	var result error
	switch s.Outcome {
	case transport.Ack:
		for i, w := range s.Writes {
			if w == nil {
				return &transport.SettleWriteError{Queue: c.queue, Err: errors.New("nil write")}
			}
			seed := h.msgID + "\x00" + strconv.Itoa(i)
			if err := c.t.send(ctx, w, seed, h.group); err != nil {
				return &transport.SettleWriteError{Queue: w.Queue, Err: err}
			}
		}
		if _, err := c.t.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{
			QueueUrl:      aws.String(c.queueURL()),
			ReceiptHandle: aws.String(h.receipt),
		}); err != nil {
			return fmt.Errorf("sqs: delete from %q: %w", c.queue, err)
		}
	case transport.Rewind:
		if _, err := c.t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl:          aws.String(c.queueURL()),
			ReceiptHandle:     aws.String(h.receipt),
			VisibilityTimeout: 0,
		}); err != nil {
			// The heartbeat stops, so the message still comes back when its
			// visibility timeout lapses.
			result = fmt.Errorf("sqs: rewind on %q (the message returns when its visibility timeout lapses): %w", c.queue, err)
		}
	case transport.HandOff:
		// Nothing on the wire: visibility expiry redelivers it and the RedrivePolicy
		// counts the receives.
	default:
		return transport.ErrUnsupported
	}
	h.settled = true
	c.release(h)
	return result
}

// release forgets a settled message and frees its credit.
func (c *consumer) release(h *held) {
	c.mu.Lock()
	_, ok := c.live[h]
	delete(c.live, h)
	c.mu.Unlock()
	if ok {
		<-c.credits
	}
}

// giveBack makes messages visible again at once, in batches of ten.
func (c *consumer) giveBack(hs []*held) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(hs) > 0 {
		n := min(len(hs), maxBatch)
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, n)
		for i, h := range hs[:n] {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id:                aws.String(strconv.Itoa(i)),
				ReceiptHandle:     aws.String(h.receipt),
				VisibilityTimeout: 0,
			}
		}
		if _, err := c.t.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(c.queueURL()),
			Entries:  entries,
		}); err != nil {
			c.t.log.Warn("sqs: could not give messages back; they return when their visibility timeout lapses", "queue", c.queue, "count", n, "error", err)
		}
		hs = hs[n:]
	}
}

// Close stops the poller and the heartbeat and makes every unsettled message visible
// again, so another consumer receives it at once. It waits for a long poll in progress
// (at most the wait time) unless ctx ends first.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.closeOne.Do(func() { close(c.done) })
	// Let a long poll in progress finish (at most the wait time) rather than cancel it:
	// SQS may already have handed it messages, which a cancelled call would leave
	// invisible until their visibility timeout. What it receives is given back below.
	waited := make(chan struct{})
	go func() { c.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
	}
	c.cancel()
	c.mu.Lock()
	hs := make([]*held, 0, len(c.live))
	for h := range c.live {
		hs = append(hs, h)
	}
	clear(c.live)
	c.mu.Unlock()
	var back []*held
	for _, h := range hs {
		h.mu.Lock()
		if !h.settled {
			h.settled = true
			back = append(back, h)
		}
		h.mu.Unlock()
	}
	c.giveBack(back)
	c.t.mu.Lock()
	delete(c.t.consumers, c)
	c.t.mu.Unlock()
	return nil
}
