package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/transport"
)

// sweepLimit bounds how many lapsed reservations one reserve call returns to the queue.
const sweepLimit = 100

// maxFetchers is how many reserve calls of one consumer may be in flight at once: the
// workers of a consumer reserve side by side, as many go-redis workers would, and the
// ones that come while maxFetchers calls are out wait and are served by the next call
// that returns (one call reserves for every worker waiting, up to the batch size).
const maxFetchers = 4

// sweepEvery is how often, at most, a consumer's reserve call also migrates due delayed
// messages and returns lapsed reservations (or the poll interval, if shorter). A
// consumer waiting on an empty list sweeps when its wait ends, at most a poll interval
// later, as before; a busy one saves two sorted-set reads on almost every reservation.
const sweepEvery = 100 * time.Millisecond

// consumer receives from one queue. Workers calling Receive at the same time share one
// reserve script call: the first reserves for itself and every worker queued behind it
// (up to the prefetch and the batch size) and hands each its message directly; a worker
// that arrives while that call is in flight queues up for the next one, which the first
// worker left waiting makes as soon as the call returns.
type consumer struct {
	t        *Transport
	queue    string
	readyKey string
	prefetch int
	// The keys of the default layout: reserve script keys, then settle script keys.
	reserveKeys, settleKeys []string

	// book holds the reservations handed out and not finished: their prefetch slots
	// and settle state. It is closed with mu held, so under mu !closed means open.
	book *ledger.Ledger[*handle]

	mu        sync.Mutex
	closed    bool
	fetchers  int       // Receive calls in a reserve call now
	reserving int       // messages those reserve calls may bring
	buf       []*handle // reserved, not yet handed out
	waiting   []*waiter // Receive calls waiting, first come first served

	swept   time.Time // when a reserve call last swept
	settles committer[settleItem]

	// Deferred acks (Transport.ackLinger > 0): acknowledged reservations whose removal
	// has not been sent yet. The next reserve call carries them, or the flush timer
	// sends them after the linger.
	acks     []*handle
	ackTimer *time.Timer
	flushes  sync.WaitGroup // flush timer calls sending acks
}

// waiter is a Receive call waiting for a message or for its turn to reserve.
type waiter struct {
	ch chan *ledger.Entry[*handle] // one send: a reservation handed out to it, or nil to look again
}

// settleItem is one reservation to settle and how.
type settleItem struct {
	h      *handle
	rewind bool
	writes []*transport.Message
}

// handle is the transport's bookkeeping for one reservation.
type handle struct {
	c *consumer
	// member is the token of the deadline member (default layout: the member itself is
	// "<token>:<raw>", which the scripts put together, so a settle sends the body once)
	// or the reserved member (laravel).
	member string
	raw    string // the element as stored in the list
	hdr    string // laravel: the headers JSON from the header hash, or ""
}

func newConsumer(t *Transport, queue string, prefetch int) *consumer {
	c := &consumer{
		t:        t,
		queue:    queue,
		readyKey: t.ready(queue),
		prefetch: prefetch,
		book:     ledger.New[*handle](ledger.Config{Broker: "redis", Queue: queue, Prefetch: prefetch, Logger: t.log}),
	}
	c.reserveKeys = []string{queue, processingKey(queue), deadlinesKey(queue), delayedKey(queue)}
	c.settleKeys = []string{processingKey(queue), deadlinesKey(queue), c.readyKey, c.readyKey}
	c.settles.run = c.settleGroup
	c.settles.lanes = groupLanes
	return c
}

// handOutLocked gives h to the first waiting Receive call, or keeps it in buf for the
// next one when nobody waits.
func (c *consumer) handOutLocked(h *handle) {
	if len(c.waiting) == 0 {
		c.buf = append(c.buf, h)
		return
	}
	w := c.waiting[0]
	c.waiting = slices.Delete(c.waiting, 0, 1)
	e, _ := c.book.Add(h) // the book is open while c.closed is false
	w.ch <- e
}

// nudgeLocked wakes the first waiting Receive call to reserve when nobody is reserving
// and the prefetch allows another message.
func (c *consumer) nudgeLocked() {
	if c.fetchers >= maxFetchers || len(c.waiting) == 0 || c.book.Held()+len(c.buf)+c.reserving >= c.prefetch {
		return
	}
	w := c.waiting[0]
	c.waiting = slices.Delete(c.waiting, 0, 1)
	w.ch <- nil
}

// Receive blocks until a message is reserved for the caller, ctx ends or the consumer
// is closed. While settlements fail it first waits out their backoff.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	if err := c.book.Pause(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	backoff := 50 * time.Millisecond
	for {
		if c.closed {
			c.mu.Unlock()
			return nil, transport.ErrClosed
		}
		if len(c.buf) > 0 {
			h := c.buf[0]
			c.buf[0] = nil
			c.buf = c.buf[1:]
			e, _ := c.book.Add(h)
			c.mu.Unlock()
			return c.delivery(e), nil
		}
		if room := c.prefetch - c.book.Held() - len(c.buf) - c.reserving; room > 0 && c.fetchers < maxFetchers {
			// Up to the prefetch: what the waiting workers need now, and what a prefetch
			// larger than the concurrency asks to hold ahead (one round trip for several).
			n := min(room, c.t.batch)
			c.fetchers++
			c.reserving += n
			acks := c.takeAcksLocked()
			now := time.Now()
			sweep := now.Sub(c.swept) >= min(sweepEvery, c.t.poll)
			if sweep {
				c.swept = now
			}
			c.mu.Unlock()
			hs, err := c.reserve(ctx, n, sweep, acks)
			if err == nil && len(hs) == 0 {
				err = c.wait(ctx)
			}
			c.mu.Lock()
			c.fetchers--
			c.reserving -= n
			if c.closed {
				c.mu.Unlock()
				if len(hs) > 0 {
					_ = c.rewindAll(context.WithoutCancel(ctx), hs)
				}
				return nil, transport.ErrClosed
			}
			if len(hs) > 0 {
				mine, _ := c.book.Add(hs[0])
				for _, h := range hs[1:] {
					c.handOutLocked(h)
				}
				c.nudgeLocked() // workers still waiting: the first reserves for them now
				c.mu.Unlock()
				return c.delivery(mine), nil
			}
			if err != nil {
				if ctxErr := ctx.Err(); ctxErr != nil {
					c.nudgeLocked()
					c.mu.Unlock()
					return nil, ctxErr
				}
				c.t.log.Warn("redis: reserve failed; retrying", "queue", c.queue, "error", err, "backoff", backoff)
				c.mu.Unlock()
				serr := sleep(ctx, c.book.Done(), backoff)
				c.mu.Lock()
				if serr != nil {
					c.nudgeLocked()
					c.mu.Unlock()
					return nil, serr
				}
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			continue
		}
		w := &waiter{ch: make(chan *ledger.Entry[*handle], 1)}
		c.waiting = append(c.waiting, w)
		c.mu.Unlock()
		select {
		case e := <-w.ch:
			c.mu.Lock()
			if e != nil {
				closed := c.closed
				c.mu.Unlock()
				if closed { // Close took it back between the hand-out and now
					return nil, transport.ErrClosed
				}
				return c.delivery(e), nil
			}
			// nudged: look again
		case <-ctx.Done():
			c.mu.Lock()
			c.leaveLocked(w)
			c.mu.Unlock()
			return nil, ctx.Err()
		case <-c.book.Done():
			c.mu.Lock()
			c.leaveLocked(w)
		}
	}
}

// leaveLocked takes w out of the queue of waiting Receive calls. What was already sent
// to it goes on: a handle to the next waiting call (or buf), a nudge to the next call.
func (c *consumer) leaveLocked(w *waiter) {
	if i := slices.Index(c.waiting, w); i >= 0 {
		c.waiting = slices.Delete(c.waiting, i, i+1)
		return
	}
	// Not queued any more, so something was sent to it (under c.mu, before we got it).
	e := <-w.ch
	if e == nil {
		c.nudgeLocked()
		return
	}
	if c.closed || !c.book.Withdraw(e) {
		return // Close took it back already
	}
	h := e.Value
	if len(c.waiting) > 0 {
		c.handOutLocked(h)
		return
	}
	c.buf = slices.Insert(c.buf, 0, h) // it was reserved first, so it goes first
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

// delivery builds what the runtime sees of the reservation e holds.
func (c *consumer) delivery(e *ledger.Entry[*handle]) *transport.Delivery {
	h := e.Value
	d := &transport.Delivery{Queue: c.queue, Handle: e}
	raw := []byte(h.raw) // the one copy: h.raw is what the settle names, never changed
	if !c.t.laravel {
		if body, headers, ok := unframe(raw); ok {
			d.Body, d.Headers = body, headers
			return d
		}
	}
	d.Body = raw
	if h.hdr != "" {
		var hs map[string]string
		if json.Unmarshal([]byte(h.hdr), &hs) == nil && len(hs) > 0 {
			d.Headers = hs
		}
	}
	return d
}

// reserve runs the reserve script for up to n messages, sweeping first when sweep is
// set (the Laravel layout always migrates, as Laravel does). Deferred acks ride in the
// same round trip, ahead of the reservation: in the reserve script itself (default
// layout) or in a settle script pipelined before it (Laravel's reserve script stays as
// Laravel has it). Only a fetching worker calls it.
func (c *consumer) reserve(ctx context.Context, n int, sweep bool, acks []*handle) ([]*handle, error) {
	now := time.Now()
	if c.t.laravel {
		return c.reserveLaravel(ctx, now, n, acks)
	}
	deadline := math.Inf(1)
	if c.t.retryAfter > 0 {
		deadline = unixSeconds(now.Add(c.t.retryAfter))
	}
	sweepArg := "0"
	if sweep {
		sweepArg = "1"
	}
	args := make([]any, 0, 5+2*len(acks)+n)
	args = append(args, fmtScore(unixSeconds(now)), fmtScore(deadline), sweepLimit, sweepArg, len(acks))
	for _, h := range acks {
		args = append(args, h.member, h.raw)
	}
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = c.t.token()
		args = append(args, tokens[i])
	}
	res, err := reserveDefault.Run(ctx, c.t.client, c.reserveKeys, args...).StringSlice()
	if err == nil && (len(res) == 0 || len(res[0]) != len(acks)) {
		err = fmt.Errorf("reserve script answered %q for %d acks", res, len(acks))
	}
	if err != nil {
		if len(acks) > 0 {
			c.acksSent(acks, nil, err)
		}
		return nil, err
	}
	if len(acks) > 0 {
		ok := make([]bool, len(acks))
		for i := range ok {
			ok[i] = res[0][i] == '1'
		}
		c.acksSent(acks, ok, nil)
	}
	hs := make([]*handle, len(res)-1)
	for i, raw := range res[1:] {
		hs[i] = &handle{c: c, raw: raw, member: tokens[i]}
	}
	return hs, nil
}

// reserveLaravel runs Laravel's reserve script for up to n jobs, after a settle script
// for the deferred acks in the same round trip (a pipeline, so a failed settle does not
// stop the reservation).
func (c *consumer) reserveLaravel(ctx context.Context, now time.Time, n int, acks []*handle) ([]*handle, error) {
	t := c.t
	score := "+inf"
	migrateReserved := "0"
	if t.retryAfter > 0 {
		score = strconv.FormatInt(now.Add(t.retryAfter).Unix(), 10)
		migrateReserved = "1"
	}
	ready := c.readyKey
	keys := []string{ready, reservedKey(ready), notifyKey(ready), delayedKey(ready), headersKey(ready)}
	args := []any{strconv.FormatInt(now.Unix(), 10), score, n, migrateReserved}
	var rc *goredis.Cmd
	if len(acks) == 0 {
		rc = reserveLaravel.Run(ctx, t.client, keys, args...)
	} else {
		skeys, sargs, _ := c.settleCall(ackItems(acks), now) // acks carry no writes
		pipe := t.client.Pipeline()
		sc := pipe.EvalSha(ctx, settle.Hash(), skeys, sargs...)
		rc = pipe.EvalSha(ctx, reserveLaravel.Hash(), keys, args...)
		_, _ = pipe.Exec(ctx)
		if isNoScript(sc.Err()) { // Redis restarted or its script cache was flushed
			sc = settle.Eval(ctx, t.client, skeys, sargs...)
		}
		if isNoScript(rc.Err()) {
			rc = reserveLaravel.Eval(ctx, t.client, keys, args...)
		}
		res, err := sc.Int64Slice()
		ok := make([]bool, len(res))
		for i, n := range res {
			ok[i] = n == 1
		}
		c.acksSent(acks, ok, err)
	}
	res, err := rc.StringSlice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	hs := make([]*handle, 0, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		hs = append(hs, &handle{c: c, raw: res[i], member: res[i+1], hdr: res[i+2]})
	}
	return hs, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// ackItems are the settle items of deferred acks.
func ackItems(acks []*handle) []settleItem {
	items := make([]settleItem, len(acks))
	for i, h := range acks {
		items[i] = settleItem{h: h}
	}
	return items
}

// takeAcksLocked takes the deferred acks waiting to be sent.
func (c *consumer) takeAcksLocked() []*handle {
	acks := c.acks
	c.acks = nil
	if len(acks) > 0 && c.ackTimer != nil {
		c.ackTimer.Stop()
	}
	return acks
}

// deferAckLocked queues h's ack for the next reserve call, or for the flush timer.
func (c *consumer) deferAckLocked(h *handle) {
	c.acks = append(c.acks, h)
	if len(c.acks) > 1 {
		return
	}
	if c.ackTimer == nil {
		c.ackTimer = time.AfterFunc(c.t.ackLinger, c.flushAcks)
	} else {
		c.ackTimer.Reset(c.t.ackLinger)
	}
}

// flushAcks sends the deferred acks no reserve call has carried within the linger.
func (c *consumer) flushAcks() {
	c.mu.Lock()
	acks := c.takeAcksLocked()
	if len(acks) == 0 {
		c.mu.Unlock()
		return
	}
	c.flushes.Add(1) // before Close marks the consumer closed: Close waits for it
	c.mu.Unlock()
	defer c.flushes.Done()
	ctx, cancel := context.WithTimeout(context.Background(), ackFlushTimeout)
	defer cancel()
	res, err := c.runSettle(ctx, ackItems(acks))
	c.acksSent(acks, res, err)
}

// ackFlushTimeout bounds one attempt to send deferred acks from the flush timer.
const ackFlushTimeout = 10 * time.Second

// acksSent records the answer to sending deferred acks. When the call failed they go
// back to be sent again (after the linger, or with the next reserve call); an ack whose
// reservation had already lapsed is logged: its message is (or was) delivered again.
func (c *consumer) acksSent(acks []*handle, res []bool, err error) {
	if err == nil && len(res) != len(acks) {
		err = fmt.Errorf("settle script answered %d results for %d reservations", len(res), len(acks))
	}
	if err != nil {
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.acks = append(acks, c.acks...)
			if c.ackTimer != nil {
				c.ackTimer.Reset(max(c.t.ackLinger, 100*time.Millisecond))
			}
		}
		c.mu.Unlock()
		c.t.log.Warn("redis: sending deferred acks failed", "queue", c.queue, "acks", len(acks), "error", err, "retrying", !closed)
		return
	}
	if lost := len(res) - countTrue(res); lost > 0 {
		c.t.log.Warn("redis: reservation lapsed before its deferred ack was sent; the message is delivered again",
			"queue", c.queue, "acks", lost)
	}
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
// writes, and the removal of the reservation, or nothing at all. A reservation that
// lapsed (and was swept back to the queue) fails with a [transport.TakenBackError]
// wrapping [ErrReservationLost].
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	h := e.Value
	if c.t.ackLinger > 0 && s.Outcome == transport.Ack && len(s.Writes) == 0 {
		c.mu.Lock()
		if !c.closed { // Close sends the deferred acks it finds
			c.deferAckLocked(h)
			c.mu.Unlock()
			return c.finish(e, s, nil)
		}
		c.mu.Unlock()
	}
	return c.finish(e, s, c.settle(ctx, h, s))
}

// finish records the end of a settle and lets a worker waiting for the freed prefetch
// slot reserve.
func (c *consumer) finish(e *ledger.Entry[*handle], s transport.Settlement, err error) error {
	err = c.book.Finish(e, s, err)
	c.mu.Lock()
	c.nudgeLocked()
	c.mu.Unlock()
	return err
}

// settle runs the settle script for one reservation.
func (c *consumer) settle(ctx context.Context, h *handle, s transport.Settlement) error {
	item := settleItem{h: h, rewind: s.Outcome == transport.Rewind, writes: s.Writes}
	var settled bool
	var err error
	if len(s.Writes) == 0 {
		// Acks and rewinds that several workers ask for at once go in one script call.
		cl := &call[settleItem]{arg: item}
		c.settles.do(ctx, cl)
		settled, err = cl.ok, cl.err
	} else {
		// A settlement with writes goes alone, so a failed write fails only its own.
		var res []bool
		res, err = c.runSettle(ctx, []settleItem{item})
		settled = err == nil && res[0]
	}
	switch {
	case errors.Is(err, transport.ErrSettleWrite):
		return err
	case err != nil && len(s.Writes) > 0:
		return &transport.SettleWriteError{Queue: s.Writes[0].Queue, Err: err}
	case err != nil:
		return fmt.Errorf("redis: %s on %q: %w", s.Outcome, c.queue, err)
	case !settled:
		return &transport.TakenBackError{Broker: "redis", Queue: c.queue, Reason: "the reservation lapsed and was swept back to the queue", Err: ErrReservationLost}
	}
	return nil
}

// settleGroup runs the settle script for a group of Settle calls.
func (c *consumer) settleGroup(ctx context.Context, calls []*call[settleItem]) {
	items := make([]settleItem, len(calls))
	for i, cl := range calls {
		items[i] = cl.arg
	}
	res, err := c.runSettle(ctx, items)
	for i, cl := range calls {
		if err != nil {
			cl.err = err
		} else {
			cl.ok = res[i]
		}
	}
}

// runSettle runs the settle script once for items and reports, per item, whether its
// gate passed.
func (c *consumer) runSettle(ctx context.Context, items []settleItem) ([]bool, error) {
	keys, args, err := c.settleCall(items, time.Now())
	if err != nil {
		return nil, err
	}
	res, err := settle.Run(ctx, c.t.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(items) {
		return nil, fmt.Errorf("settle script answered %d results for %d reservations", len(res), len(items))
	}
	ok := make([]bool, len(res))
	for i, n := range res {
		ok[i] = n == 1
	}
	return ok, nil
}

// settleCall is the keys and arguments of the settle script for items. A write longer
// than Redis stores fails it with a [transport.SettleWriteError].
func (c *consumer) settleCall(items []settleItem, now time.Time) ([]string, []any, error) {
	t := c.t
	ready := c.readyKey
	nw := 0
	for _, it := range items {
		nw += len(it.writes)
	}
	keys := make([]string, 4, 4+2*nw)
	args := make([]any, 1, 1+4*len(items)+4*nw)
	if t.laravel {
		keys[0], keys[1], keys[2], keys[3] = reservedKey(ready), headersKey(ready), ready, notifyKey(ready)
		args[0] = "l"
	} else {
		copy(keys, c.settleKeys)
		args[0] = "d"
	}
	for _, it := range items {
		outcome := "ack"
		if it.rewind {
			outcome = "rewind"
		}
		args = append(args, it.h.member, it.h.raw, outcome, len(it.writes))
		for _, w := range it.writes {
			op, score, value, hdr, wk := t.writeOp(w, now)
			if err := t.checkSize(w.Queue, value); err != nil {
				return nil, nil, &transport.SettleWriteError{Queue: w.Queue, Err: err}
			}
			keys = append(keys, wk...)
			args = append(args, op, score, value, hdr)
		}
	}
	return keys, args, nil
}

// rewindAll gives reservations back to the head of the queue, in one script call per
// [maxGroup] of them.
func (c *consumer) rewindAll(ctx context.Context, hs []*handle) error {
	items := make([]settleItem, 0, len(hs))
	for i := len(hs) - 1; i >= 0; i-- { // last first, so the first ends at the head
		items = append(items, settleItem{h: hs[i], rewind: true})
	}
	var errs []error
	failed := 0
	for len(items) > 0 {
		n := min(len(items), maxGroup)
		if _, err := c.runSettle(ctx, items[:n]); err != nil {
			errs = append(errs, err)
			failed += n
		}
		items = items[n:]
	}
	if len(errs) > 0 {
		return fmt.Errorf("redis: rewinding %d reservation(s) on close (they come back after retry_after): %w", failed, errors.Join(errs...))
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
	acks := c.takeAcksLocked()
	hs := append(c.buf, c.book.Close()...)
	c.buf = nil
	c.mu.Unlock()
	c.t.forget(c)
	c.flushes.Wait() // a flush the timer started finishes first
	var err error
	if len(acks) > 0 {
		var res []bool
		if res, err = c.runSettle(ctx, ackItems(acks)); err != nil {
			err = fmt.Errorf("redis: sending %d deferred ack(s) on close (their messages come back after retry_after): %w", len(acks), err)
		} else {
			c.acksSent(acks, res, nil)
		}
	}
	return errors.Join(err, c.rewindAll(ctx, hs))
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
