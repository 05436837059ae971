package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
)

// sweepLimit bounds how many lapsed reservations one reserve call returns to the queue.
const sweepLimit = 100

// consumer receives from one queue. Workers calling Receive at the same time share one
// reserve script call: the first reserves for every waiting worker (up to the prefetch
// and the batch size), the others take from what it brought back.
type consumer struct {
	t        *Transport
	queue    string
	readyKey string
	prefetch int

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when buf, out or closed change
	done     chan struct{}
	closed   bool
	waiters  int
	fetching bool
	buf      []*handle        // reserved, not yet handed out
	out      map[*handle]bool // handed out and not settled; true while a Settle runs
}

// handle is the transport's bookkeeping for one reservation.
type handle struct {
	c      *consumer
	member string // the deadline member (default) or the reserved member (laravel)
	raw    string // the element as stored in the list
	hdr    string // laravel: the headers JSON from the header hash, or ""
}

func newConsumer(t *Transport, queue string, prefetch int) *consumer {
	return &consumer{
		t:        t,
		queue:    queue,
		readyKey: t.ready(queue),
		prefetch: prefetch,
		changed:  make(chan struct{}),
		done:     make(chan struct{}),
		out:      map[*handle]bool{},
	}
}

func (c *consumer) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Receive blocks until a message is reserved for the caller, ctx ends or the consumer
// is closed.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.waiters++
	defer func() {
		c.waiters--
		c.mu.Unlock()
	}()
	backoff := 50 * time.Millisecond
	for {
		if c.closed {
			return nil, transport.ErrClosed
		}
		if len(c.buf) > 0 {
			h := c.buf[0]
			c.buf[0] = nil
			c.buf = c.buf[1:]
			c.out[h] = false
			return c.delivery(h), nil
		}
		if !c.fetching && len(c.out)+len(c.buf) < c.prefetch {
			n := min(c.waiters, c.prefetch-len(c.out)-len(c.buf), c.t.batch)
			c.fetching = true
			c.mu.Unlock()
			hs, err := c.reserve(ctx, n)
			if err == nil && len(hs) == 0 {
				err = c.wait(ctx)
			}
			c.mu.Lock()
			c.fetching = false
			c.broadcastLocked()
			if c.closed {
				if len(hs) > 0 {
					c.mu.Unlock()
					c.rewindAll(context.WithoutCancel(ctx), hs)
					c.mu.Lock()
				}
				return nil, transport.ErrClosed
			}
			c.buf = append(c.buf, hs...)
			if err != nil && len(hs) == 0 {
				if ctxErr := ctx.Err(); ctxErr != nil {
					return nil, ctxErr
				}
				c.t.log.Warn("redis: reserve failed; retrying", "queue", c.queue, "error", err, "backoff", backoff)
				c.mu.Unlock()
				serr := sleep(ctx, c.done, backoff)
				c.mu.Lock()
				if serr != nil {
					return nil, serr
				}
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			continue
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
			c.mu.Lock()
		case <-ctx.Done():
			c.mu.Lock()
			return nil, ctx.Err()
		case <-c.done:
			c.mu.Lock()
		}
	}
}

func sleep(ctx context.Context, done <-chan struct{}, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return transport.ErrClosed
	}
}

// delivery builds what the runtime sees of h.
func (c *consumer) delivery(h *handle) *transport.Delivery {
	d := &transport.Delivery{Queue: c.queue, Handle: h}
	if !c.t.laravel {
		if body, headers, ok := unframe([]byte(h.raw)); ok {
			d.Body, d.Headers = body, headers
			return d
		}
	}
	d.Body = []byte(h.raw)
	if h.hdr != "" {
		var hs map[string]string
		if json.Unmarshal([]byte(h.hdr), &hs) == nil && len(hs) > 0 {
			d.Headers = hs
		}
	}
	return d
}

// reserve runs the reserve script for up to n messages.
func (c *consumer) reserve(ctx context.Context, n int) ([]*handle, error) {
	now := time.Now()
	t := c.t
	if t.laravel {
		score := "+inf"
		migrateReserved := "0"
		if t.retryAfter > 0 {
			score = strconv.FormatInt(now.Add(t.retryAfter).Unix(), 10)
			migrateReserved = "1"
		}
		ready := c.readyKey
		res, err := reserveLaravel.Run(ctx, t.client,
			[]string{ready, reservedKey(ready), notifyKey(ready), delayedKey(ready), headersKey(ready)},
			strconv.FormatInt(now.Unix(), 10), score, n, migrateReserved).StringSlice()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, err
		}
		hs := make([]*handle, 0, len(res)/3)
		for i := 0; i+2 < len(res); i += 3 {
			hs = append(hs, &handle{c: c, raw: res[i], member: res[i+1], hdr: res[i+2]})
		}
		return hs, nil
	}
	deadline := math.Inf(1)
	if t.retryAfter > 0 {
		deadline = unixSeconds(now.Add(t.retryAfter))
	}
	args := make([]any, 0, 3+n)
	args = append(args, fmtScore(unixSeconds(now)), fmtScore(deadline), sweepLimit)
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = t.token()
		args = append(args, tokens[i])
	}
	q := c.queue
	res, err := reserveDefault.Run(ctx, t.client,
		[]string{q, processingKey(q), deadlinesKey(q), delayedKey(q)}, args...).StringSlice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	hs := make([]*handle, len(res))
	for i, raw := range res {
		hs[i] = &handle{c: c, raw: raw, member: tokens[i] + ":" + raw}
	}
	return hs, nil
}

// wait blocks until the ready list has an element, the poll interval passes or ctx's
// deadline comes. It moves nothing: BLMOVE from the list to its own head is a blocking
// look that leaves the list as it was, so no message is ever held outside a reservation.
func (c *consumer) wait(ctx context.Context) error {
	d := c.t.poll
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 {
		return ctx.Err()
	}
	var err error
	if d >= time.Second {
		err = c.t.client.BLMove(ctx, c.readyKey, c.readyKey, "LEFT", "LEFT", d.Truncate(time.Second)).Err()
	} else {
		d = max(d, 10*time.Millisecond)
		err = c.t.client.Do(ctx, "blmove", c.readyKey, c.readyKey, "LEFT", "LEFT",
			strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err()
	}
	if errors.Is(err, goredis.Nil) {
		err = nil
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Settle finishes d in one script: the gate (the reservation is still ours), the
// writes, and the removal of the reservation, or nothing at all.
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	h, ok := d.Handle.(*handle)
	if !ok || h.c != c {
		return errors.New("redis: delivery does not belong to this consumer")
	}
	switch s.Outcome {
	case transport.Ack, transport.Rewind:
	default:
		return transport.ErrUnsupported
	}
	if len(s.Writes) > 0 && s.Outcome != transport.Ack {
		return errors.New("redis: settle writes are only allowed with Ack")
	}
	for _, w := range s.Writes {
		if w == nil || w.Queue == "" {
			return errors.New("redis: settle write has no queue")
		}
	}
	c.mu.Lock()
	busy, held := c.out[h]
	if !held || busy {
		c.mu.Unlock()
		return transport.ErrAlreadySettled
	}
	c.out[h] = true
	c.mu.Unlock()

	settled, err := c.runSettle(ctx, h, s.Outcome, s.Writes)

	c.mu.Lock()
	if err != nil {
		c.out[h] = false
	} else {
		delete(c.out, h)
		c.broadcastLocked()
	}
	c.mu.Unlock()
	switch {
	case err != nil && len(s.Writes) > 0:
		return &transport.SettleWriteError{Queue: s.Writes[0].Queue, Err: err}
	case err != nil:
		return fmt.Errorf("redis: %s on %q: %w", s.Outcome, c.queue, err)
	case !settled:
		return ErrReservationLost
	}
	return nil
}

// runSettle runs the settle script for h and reports whether the gate passed.
func (c *consumer) runSettle(ctx context.Context, h *handle, o transport.Outcome, writes []*transport.Message) (bool, error) {
	t := c.t
	ready := c.readyKey
	keys := make([]string, 4, 4+2*len(writes))
	args := make([]any, 4, 4+4*len(writes))
	if t.laravel {
		keys[0], keys[1], keys[2], keys[3] = reservedKey(ready), headersKey(ready), ready, notifyKey(ready)
		args[0] = "l"
	} else {
		keys[0], keys[1], keys[2], keys[3] = processingKey(c.queue), deadlinesKey(c.queue), ready, ready
		args[0] = "d"
	}
	args[1], args[2] = h.member, h.raw
	args[3] = "ack"
	if o == transport.Rewind {
		args[3] = "rewind"
	}
	now := time.Now()
	for _, w := range writes {
		op, score, value, hdr, wk := t.writeOp(w, now)
		keys = append(keys, wk...)
		args = append(args, op, score, value, hdr)
	}
	n, err := settle.Run(ctx, t.client, keys, args...).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// rewindAll gives reservations back to the head of the queue.
func (c *consumer) rewindAll(ctx context.Context, hs []*handle) error {
	var errs []error
	for i := len(hs) - 1; i >= 0; i-- { // last first, so the first ends at the head
		if _, err := c.runSettle(ctx, hs[i], transport.Rewind, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redis: rewinding %d reservation(s) on close (they come back after retry_after): %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// Close stops the consumer and rewinds every reservation it holds, handed out or not.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	hs := append([]*handle(nil), c.buf...)
	c.buf = nil
	for h, busy := range c.out {
		if !busy {
			hs = append(hs, h)
			delete(c.out, h)
		}
	}
	c.broadcastLocked()
	c.mu.Unlock()
	c.t.forget(c)
	return c.rewindAll(ctx, hs)
}
