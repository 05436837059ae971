package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// sweepLimit bounds how many lapsed reservations one reserve call returns to the queue.
const sweepLimit = 100

// sweepEvery is how often, at most, a consumer's reserve call also migrates due delayed
// messages and returns lapsed reservations (or the poll interval, if shorter). A
// consumer waiting on an empty list sweeps when its wait ends, at most a poll interval
// later; a busy one saves two sorted-set reads on almost every reservation.
const sweepEvery = 100 * time.Millisecond

// ackFlushTimeout bounds one attempt to send deferred acks from the flush timer.
const ackFlushTimeout = 10 * time.Second

// Consume opens a consumer on queue. The receive loop, the prefetch, settle-once, the
// backoff of failed receives and settlements, and Close are the kit's
// ([driverkit.Consumer]); this file is Redis's side of them: the reserve and settle
// scripts, the blocking wait and deferred acks.
func (t *Transport) Consume(_ context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("redis: consume needs a queue name")
	}
	if t.isClosed() {
		return nil, transport.ErrClosed
	}
	c := &consumer{t: t, queue: queue, readyKey: t.ready(queue)}
	c.reserveKeys = []string{queue, processingKey(queue), deadlinesKey(queue), delayedKey(queue)}
	c.settleKeys = []string{processingKey(queue), deadlinesKey(queue), c.readyKey, c.readyKey}
	c.settles.run = c.settleGroup
	c.settles.lanes = groupLanes
	k, err := driverkit.New[res](c, driverkit.Config{
		Broker:     "redis",
		Queue:      queue,
		Logger:     t.log,
		Group:      &t.consumers,
		AtomicAcks: true, // the settle script makes the writes and removes the reservation
		MaxBatch:   t.batch,
	}, opts)
	if err != nil {
		return nil, err
	}
	c.kit = k
	return &kitConsumer{Consumer: k, d: c}, nil
}

// kitConsumer is the consumer Consume returns: the kit's, plus SyncAcks.
type kitConsumer struct {
	*driverkit.Consumer[res]
	d *consumer
}

var _ transport.AckSyncer = (*kitConsumer)(nil)

// SyncAcks sends the deferred acks made before the call ([WithDeferredAcks]) and
// returns once Redis has them: a tool that moves messages between queues calls it after
// each move ([transport.SyncAcks]). Without deferred acks every Ack is in Redis when
// Settle returns, and SyncAcks does nothing.
func (c *kitConsumer) SyncAcks(ctx context.Context) error {
	d := c.d
	d.mu.Lock()
	acks := d.takeAcksLocked()
	d.mu.Unlock()
	if len(acks) == 0 {
		return nil
	}
	ok, err := d.runSettle(ctx, ackItems(acks))
	d.acksSent(acks, ok, err)
	if err != nil {
		return fmt.Errorf("redis: sending %d deferred ack(s): %w", len(acks), err)
	}
	return nil
}

// consumer is Redis's side of one consumer: the primitives the kit drives.
type consumer struct {
	t        *Transport
	queue    string
	readyKey string
	// The keys of the default layout: reserve script keys, then settle script keys.
	reserveKeys, settleKeys []string
	kit                     *driverkit.Consumer[res]
	settles                 committer[settleItem] // acks and rewinds of several workers in one call

	mu     sync.Mutex
	swept  time.Time // when a reserve call last swept
	closed bool      // Close ran: acks are no longer deferred

	// Deferred acks (Transport.ackLinger > 0): acknowledged reservations whose removal
	// has not been sent yet. The next reserve call carries them, or the flush timer
	// sends them after the linger, or Close.
	acks     []res
	ackTimer *time.Timer
	flushes  sync.WaitGroup // flush timer calls sending acks
}

// res is one reservation, as the kit holds it.
type res struct {
	// token is the token of the deadline member (default layout: the member itself is
	// "<token>:<raw>", which the scripts put together, so a settle sends the body once)
	// or the reserved member (laravel).
	token string
	raw   string // the element as stored in the list
	hdr   string // laravel: the headers JSON from the header hash, or ""
}

// settleItem is one reservation to settle and how.
type settleItem struct {
	r      res
	rewind bool
	writes []*transport.Message
}

// Receive reserves up to len(into) messages. On an empty list it waits for one with a
// blocking look (BLMOVE from the list to its own head, which moves nothing) sent in the
// same round trip as the reserve script that follows it: a message pushed to an idle
// queue reaches the worker in one round trip, and no message is ever held outside a
// reservation the sweep can see.
func (c *consumer) Receive(ctx context.Context, into []res) (int, error) {
	n, err := c.reserve(ctx, into, 0)
	for n == 0 && err == nil {
		var wait time.Duration
		if wait, err = c.waitFor(ctx); err == nil {
			n, err = c.reserve(ctx, into, wait)
		}
	}
	return n, err
}

// waitFor is how long the next blocking look waits: the poll interval, less when ctx
// ends sooner, and well inside the client's read timeout (a pipeline is read under it).
func (c *consumer) waitFor(ctx context.Context) (time.Duration, error) {
	select {
	case <-c.kit.Done():
		return 0, transport.ErrClosed
	default:
	}
	d := c.t.poll
	if dl, ok := ctx.Deadline(); ok {
		if d = min(d, time.Until(dl)); d <= 0 {
			return 0, context.DeadlineExceeded
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.t.waitCap > 0 {
		d = min(d, c.t.waitCap)
	}
	return max(d, 10*time.Millisecond), nil
}

// reserve runs the reserve script for up to len(into) messages. With wait > 0 a blocking
// look of up to wait goes first, in the same pipeline, and the script sweeps; else the
// script sweeps at most every [sweepEvery] and carries the deferred acks (in the script
// itself in the default layout, in a settle script pipelined before Laravel's, which
// stays as Laravel has it).
func (c *consumer) reserve(ctx context.Context, into []res, wait time.Duration) (int, error) {
	now := time.Now()
	var acks []res
	c.mu.Lock()
	sweep := wait > 0 || now.Sub(c.swept) >= min(sweepEvery, c.t.poll)
	if sweep {
		c.swept = now
	}
	if wait == 0 {
		acks = c.takeAcksLocked()
	}
	c.mu.Unlock()
	if c.t.laravel {
		return c.reserveLaravel(ctx, into, now, acks, wait)
	}
	deadline := math.Inf(1)
	if c.t.retryAfter > 0 {
		deadline = unixSeconds(now.Add(c.t.retryAfter))
	}
	sweepArg := "0"
	if sweep {
		sweepArg = "1"
	}
	args := make([]any, 0, 5+2*len(acks)+len(into))
	args = append(args, fmtScore(unixSeconds(now)), fmtScore(deadline), sweepLimit, sweepArg, len(acks))
	for _, a := range acks {
		args = append(args, a.token, a.raw)
	}
	first := len(args)
	for range into {
		args = append(args, c.t.token())
	}
	var cmd *goredis.Cmd
	if wait > 0 {
		var err error
		if cmd, err = c.afterLook(ctx, wait, func(p goredis.Pipeliner) *goredis.Cmd {
			return p.EvalSha(ctx, reserveDefault.Hash(), c.reserveKeys, args...)
		}); err != nil {
			return 0, err
		}
		if isNoScript(cmd.Err()) { // Redis restarted or its script cache was flushed
			cmd = reserveDefault.Eval(ctx, c.t.client, c.reserveKeys, args...)
		}
	} else {
		cmd = reserveDefault.Run(ctx, c.t.client, c.reserveKeys, args...)
	}
	out, err := cmd.StringSlice()
	if err == nil && (len(out) == 0 || len(out[0]) != len(acks) || len(out)-1 > len(into)) {
		err = fmt.Errorf("reserve script answered %d values for %d acks and %d reservations", len(out), len(acks), len(into))
	}
	if err != nil {
		if len(acks) > 0 {
			c.acksSent(acks, nil, err)
		}
		return 0, err
	}
	if len(acks) > 0 {
		ok := make([]bool, len(acks))
		for i := range ok {
			ok[i] = out[0][i] == '1'
		}
		c.acksSent(acks, ok, nil)
	}
	for i, raw := range out[1:] {
		into[i] = res{token: args[first+i].(string), raw: raw}
	}
	return len(out) - 1, nil
}

// afterLook sends, in one pipeline, a blocking look at the ready list of up to wait and
// the command script adds, and returns that command once both answered.
func (c *consumer) afterLook(ctx context.Context, wait time.Duration, script func(goredis.Pipeliner) *goredis.Cmd) (*goredis.Cmd, error) {
	pipe := c.t.client.Pipeline()
	look := pipe.Do(ctx, "blmove", c.readyKey, c.readyKey, "LEFT", "LEFT", strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
	cmd := script(pipe)
	_, _ = pipe.Exec(ctx)
	if err := look.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	return cmd, nil
}

// reserveLaravel runs Laravel's reserve script for up to len(into) jobs, after a settle
// script for the deferred acks in the same round trip (a pipeline, so a failed settle
// does not stop the reservation), or after a blocking look of up to wait.
func (c *consumer) reserveLaravel(ctx context.Context, into []res, now time.Time, acks []res, wait time.Duration) (int, error) {
	t := c.t
	score := "+inf"
	migrateReserved := "0"
	if t.retryAfter > 0 {
		score = strconv.FormatInt(now.Add(t.retryAfter).Unix(), 10)
		migrateReserved = "1"
	}
	ready := c.readyKey
	keys := []string{ready, reservedKey(ready), notifyKey(ready), delayedKey(ready), headersKey(ready)}
	args := []any{strconv.FormatInt(now.Unix(), 10), score, len(into), migrateReserved}
	var rc *goredis.Cmd
	switch {
	case wait > 0:
		var err error
		if rc, err = c.afterLook(ctx, wait, func(p goredis.Pipeliner) *goredis.Cmd {
			return p.EvalSha(ctx, reserveLaravel.Hash(), keys, args...)
		}); err != nil {
			return 0, err
		}
	case len(acks) == 0:
		rc = reserveLaravel.Run(ctx, t.client, keys, args...)
	default:
		skeys, sargs, _ := c.settleCall(ackItems(acks), now) // acks carry no writes
		pipe := t.client.Pipeline()
		sc := pipe.EvalSha(ctx, settle.Hash(), skeys, sargs...)
		rc = pipe.EvalSha(ctx, reserveLaravel.Hash(), keys, args...)
		_, _ = pipe.Exec(ctx)
		if isNoScript(sc.Err()) {
			sc = settle.Eval(ctx, t.client, skeys, sargs...)
		}
		vals, err := sc.Int64Slice()
		ok := make([]bool, len(vals))
		for i, n := range vals {
			ok[i] = n == 1
		}
		c.acksSent(acks, ok, err)
	}
	if isNoScript(rc.Err()) {
		rc = reserveLaravel.Eval(ctx, t.client, keys, args...)
	}
	out, err := rc.StringSlice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return 0, err
	}
	n := 0
	for i := 0; i+2 < len(out) && n < len(into); i += 3 {
		into[n] = res{raw: out[i], token: out[i+1], hdr: out[i+2]}
		n++
	}
	return n, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Decode unwraps the element: a frame's body and headers (default layout), or the job
// with the headers kept in the header hash (Laravel). The body is the one copy of the
// element: the reservation keeps the element as reserved, for its settle.
func (c *consumer) Decode(r res, d *transport.Delivery) {
	raw := []byte(r.raw)
	if !c.t.laravel {
		if body, headers, ok := unframe(raw); ok {
			d.Body, d.Headers = body, headers
			return
		}
	}
	d.Body = raw
	if r.hdr != "" {
		var hs map[string]string
		if json.Unmarshal([]byte(r.hdr), &hs) == nil && len(hs) > 0 {
			d.Headers = hs
		}
	}
}

// IsRetryable reports whether a reserve that failed may be tried again: always, but
// once the client was closed.
func (c *consumer) IsRetryable(err error) bool { return !errors.Is(err, goredis.ErrClosed) }

// Ack removes the reservation (the settle script, grouped with the acks and rewinds
// other workers of the consumer make meanwhile), or defers the removal to the next
// reserve call ([WithDeferredAcks]).
func (c *consumer) Ack(ctx context.Context, r res) error {
	if c.t.ackLinger > 0 {
		c.mu.Lock()
		if !c.closed { // Close sends the deferred acks it finds
			c.deferAckLocked(r)
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
	}
	return c.settleOne(ctx, settleItem{r: r}, transport.Ack)
}

// AckWrites makes the settle writes and removes the reservation in one script call of
// its own, so that a refused write fails only its own settlement.
func (c *consumer) AckWrites(ctx context.Context, r res, ws []*transport.Message) error {
	ok, err := c.runSettle(ctx, []settleItem{{r: r, writes: ws}})
	if err != nil {
		return err // the kit makes it a *transport.SettleWriteError
	}
	if !ok[0] {
		return c.lost()
	}
	return nil
}

// GiveBack puts reservations back at the head of the queue, in their order.
func (c *consumer) GiveBack(ctx context.Context, rs []res, why driverkit.Reason) error {
	if len(rs) == 1 && why != driverkit.Closing {
		return c.settleOne(ctx, settleItem{r: rs[0], rewind: true}, transport.Rewind)
	}
	items := make([]settleItem, 0, len(rs))
	for i := len(rs) - 1; i >= 0; i-- { // last first, so the first ends at the head
		items = append(items, settleItem{r: rs[i], rewind: true})
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
		return fmt.Errorf("redis: giving back %d reservation(s) (%s; they come back after retry_after): %w", failed, why, errors.Join(errs...))
	}
	return nil
}

// settleOne runs the settle script for an ack or rewind without writes, in one call
// with those other workers of the consumer ask for meanwhile.
func (c *consumer) settleOne(ctx context.Context, it settleItem, o transport.Outcome) error {
	cl := &call[settleItem]{arg: it}
	c.settles.do(ctx, cl)
	switch {
	case cl.err != nil:
		return fmt.Errorf("redis: %s on %q: %w", o, c.queue, cl.err)
	case !cl.ok:
		return c.lost()
	}
	return nil
}

// lost is the error of a settle whose gate refused: the reservation lapsed.
func (c *consumer) lost() error {
	return &transport.TakenBackError{Broker: "redis", Queue: c.queue, Reason: "the reservation lapsed and was swept back to the queue", Err: ErrReservationLost}
}

// Close sends the deferred acks left: the kit gave back what was held.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	acks := c.takeAcksLocked()
	c.mu.Unlock()
	c.flushes.Wait() // a flush the timer started finishes first
	if len(acks) == 0 {
		return nil
	}
	ok, err := c.runSettle(ctx, ackItems(acks))
	if err != nil {
		return fmt.Errorf("redis: sending %d deferred ack(s) on close (their messages come back after retry_after): %w", len(acks), err)
	}
	c.acksSent(acks, ok, nil)
	return nil
}

// ackItems are the settle items of deferred acks.
func ackItems(acks []res) []settleItem {
	items := make([]settleItem, len(acks))
	for i, r := range acks {
		items[i] = settleItem{r: r}
	}
	return items
}

// takeAcksLocked takes the deferred acks waiting to be sent.
func (c *consumer) takeAcksLocked() []res {
	acks := c.acks
	c.acks = nil
	if len(acks) > 0 && c.ackTimer != nil {
		c.ackTimer.Stop()
	}
	return acks
}

// deferAckLocked queues r's ack for the next reserve call, or for the flush timer.
func (c *consumer) deferAckLocked(r res) {
	c.acks = append(c.acks, r)
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
	if len(acks) == 0 || c.closed {
		c.mu.Unlock()
		return
	}
	c.flushes.Add(1) // before Close marks the consumer closed: Close waits for it
	c.mu.Unlock()
	defer c.flushes.Done()
	ctx, cancel := context.WithTimeout(context.Background(), ackFlushTimeout)
	defer cancel()
	ok, err := c.runSettle(ctx, ackItems(acks))
	c.acksSent(acks, ok, err)
}

// acksSent records the answer to sending deferred acks. When the call failed they go
// back to be sent again (after the linger, or with the next reserve call); an ack whose
// reservation had already lapsed is logged: its message is (or was) delivered again.
func (c *consumer) acksSent(acks []res, ok []bool, err error) {
	if err == nil && len(ok) != len(acks) {
		err = fmt.Errorf("settle script answered %d results for %d reservations", len(ok), len(acks))
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
	lost := 0
	for _, b := range ok {
		if !b {
			lost++
		}
	}
	if lost > 0 {
		c.t.log.Warn("redis: reservation lapsed before its deferred ack was sent; the message is delivered again",
			"queue", c.queue, "acks", lost)
	}
}

// settleGroup runs the settle script for a group of Settle calls.
func (c *consumer) settleGroup(ctx context.Context, calls []*call[settleItem]) {
	items := make([]settleItem, len(calls))
	for i, cl := range calls {
		items[i] = cl.arg
	}
	ok, err := c.runSettle(ctx, items)
	for i, cl := range calls {
		if err != nil {
			cl.err = err
		} else {
			cl.ok = ok[i]
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
	vals, err := settle.Run(ctx, c.t.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(vals) != len(items) {
		return nil, fmt.Errorf("settle script answered %d results for %d reservations", len(vals), len(items))
	}
	ok := make([]bool, len(vals))
	for i, n := range vals {
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
		args = append(args, it.r.token, it.r.raw, outcome, len(it.writes))
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
