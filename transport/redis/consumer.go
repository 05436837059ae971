package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// sweepLimit bounds how many lapsed reservations one reserve call returns to the queue.
const sweepLimit = 100

// sweepEvery is how often, at most, a busy consumer's reserve call also migrates due
// delayed messages and returns lapsed reservations (or the poll interval, if shorter);
// a reserve call after a wait on an empty list always does.
const sweepEvery = 100 * time.Millisecond

// Consume opens a consumer on queue. The receive loop, the prefetch, settle-once, the
// backoff of failed receives and settlements, and Close are the kit's
// ([driverkit.Consumer]); this file is Redis's side of them: the reserve and settle
// scripts, the wait on an empty list and deferred acks.
func (t *Transport) Consume(_ context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("redis: consume needs a queue name")
	}
	if t.isClosed() {
		return nil, transport.ErrClosed
	}
	if err := t.checkSlot(queue); err != nil {
		return nil, err
	}
	c := &consumer{t: t, queue: queue, readyKey: t.ready(queue)}
	if ready := c.readyKey; t.laravel {
		c.rkeys = []string{ready, reservedKey(ready), notifyKey(ready), delayedKey(ready), headersKey(ready)}
		c.skeys = []string{reservedKey(ready), headersKey(ready), ready, notifyKey(ready)}
	} else {
		c.rkeys = []string{queue, processingKey(queue), deadlinesKey(queue), delayedKey(queue)}
		c.skeys = []string{processingKey(queue), deadlinesKey(queue), ready, ready}
	}
	c.settles.run = c.settleGroup
	c.settles.lanes = groupLanes
	k, err := driverkit.New[res](c, driverkit.Config{
		Broker:     "redis",
		Queue:      queue,
		Logger:     t.log,
		Group:      &t.consumers,
		AtomicAcks: true,    // the settle script makes the writes and removes the reservation
		MaxBatch:   t.batch, // one reserve call for the workers waiting
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
// returns once Redis has them, for a tool that moves messages between queues
// ([transport.SyncAcks]). Without deferred acks it has nothing to do.
func (c *kitConsumer) SyncAcks(ctx context.Context) error { return c.d.sendAcks(ctx) }

// consumer is Redis's side of one consumer: the primitives the kit drives.
type consumer struct {
	t        *Transport
	queue    string
	readyKey string
	// The keys of the reserve and settle scripts, before those of a settle's writes.
	rkeys, skeys []string
	kit          *driverkit.Consumer[res]
	settles      committer[settleItem] // acks and rewinds of several workers in one call

	// drained is set when the last reserve call left the ready list empty: the next
	// one waits on it first, in the same round trip (default layout).
	drained atomic.Bool

	mu     sync.Mutex
	swept  time.Time // when a reserve call last swept
	closed bool      // Close ran: acks are no longer deferred
	// Deferred acks (Transport.ackLinger > 0): acknowledged reservations whose removal
	// has not been sent yet. The next reserve call carries them, or the flush timer
	// after the linger, or Close.
	acks     []res
	ackTimer *time.Timer
	flushes  sync.WaitGroup // flush timer calls sending acks
}

// res is one reservation, as the kit holds it.
type res struct {
	// token is the token of the deadline member (default layout: the member is
	// "<token>:<raw>", which the scripts put together, so a settle sends the body once)
	// or the reserved member (Laravel).
	token string
	raw   string // the element as stored in the list
	hdr   string // Laravel: the headers JSON from the header hash, or ""
}

// settleItem is one reservation to settle and how.
type settleItem struct {
	r      res
	rewind bool
	writes []*transport.Message
}

// Receive reserves up to len(into) messages. On an empty list it waits for one with a
// blocking look (BLMOVE from the list to its own head, which moves nothing) sent in one
// pipeline with the reserve script that follows it: a message pushed to an idle queue
// reaches the worker in one round trip, and no message is ever held outside a
// reservation the sweep can see.
func (c *consumer) Receive(ctx context.Context, into []res) (int, error) {
	var n int
	var err error
	if !c.drained.Load() || c.acksWaiting() { // else the look goes first: the list was empty last time
		n, err = c.reserve(ctx, into, 0)
	}
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
			<-ctx.Done() // any moment now
			return 0, ctx.Err()
		}
	}
	if c.t.waitCap > 0 {
		d = min(d, c.t.waitCap)
	}
	return max(d, 10*time.Millisecond), ctx.Err()
}

// reserve runs the layout's reserve script for up to len(into) messages. With wait > 0
// a blocking look of up to wait goes first, in the same pipeline, and the script
// sweeps; else the script sweeps at most every [sweepEvery] and the deferred acks ride
// along: in the reserve script itself (default layout), or in a settle script ahead of
// Laravel's reserve script, which stays as Laravel has it.
func (c *consumer) reserve(ctx context.Context, into []res, wait time.Duration) (int, error) {
	t := c.t
	now := time.Now()
	var acks []res
	c.mu.Lock()
	sweepArg := "0"
	switch {
	case now.Sub(c.swept) >= min(sweepEvery, t.poll):
		sweepArg, c.swept = "1", now
	case wait > 0:
		sweepArg = "2" // when the wait ended with nothing
	}
	if wait == 0 {
		acks = c.takeAcksLocked()
	}
	c.mu.Unlock()

	script, keys, args := reserveDefault, c.rkeys, []any(nil)
	if t.laravel {
		score, migrate := "+inf", "0"
		if t.retryAfter > 0 {
			score, migrate = strconv.FormatInt(now.Add(t.retryAfter).Unix(), 10), "1"
		}
		script = reserveLaravel
		args = []any{strconv.FormatInt(now.Unix(), 10), score, len(into), migrate}
	} else {
		deadline := math.Inf(1)
		if t.retryAfter > 0 {
			deadline = unixSeconds(now.Add(t.retryAfter))
		}
		args = make([]any, 0, 5+2*len(acks)+len(into))
		args = append(args, fmtScore(unixSeconds(now)), fmtScore(deadline), sweepLimit, sweepArg, len(acks))
		for _, a := range acks {
			args = append(args, a.token, a.raw)
		}
		for range into {
			args = append(args, t.token())
		}
	}

	var look, sc, rc *goredis.Cmd
	var skeys []string
	var sargs []any
	if wait == 0 && (!t.laravel || len(acks) == 0) {
		rc = script.EvalSha(ctx, t.client, keys, args...)
	} else {
		pipe := t.client.Pipeline()
		if wait > 0 {
			look = pipe.Do(ctx, "blmove", c.readyKey, c.readyKey, "LEFT", "LEFT", strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
		}
		if len(acks) > 0 { // Laravel
			skeys, sargs, _ = c.settleCall(ackItems(acks), now) // acks carry no writes
			sc = pipe.EvalSha(ctx, settle.Hash(), skeys, sargs...)
		}
		rc = pipe.EvalSha(ctx, script.Hash(), keys, args...)
		_, _ = pipe.Exec(ctx)
		if look != nil && look.Err() != nil && !errors.Is(look.Err(), goredis.Nil) {
			return 0, look.Err()
		}
	}
	if sc != nil {
		ok, err := gates(evalAgain(ctx, t.client, settle, sc, skeys, sargs).Int64Slice())
		c.acksSent(acks, ok, err)
	}
	out, err := evalAgain(ctx, t.client, script, rc, keys, args).StringSlice()
	if t.laravel {
		if err != nil && !errors.Is(err, goredis.Nil) {
			return 0, err
		}
		n := 0
		for ; 3*n+2 < len(out) && n < len(into); n++ {
			into[n] = res{raw: out[3*n], token: out[3*n+1], hdr: out[3*n+2]}
		}
		return n, nil
	}
	if err == nil && (len(out) < 2 || len(out[0]) != len(acks) || len(out)-2 > len(into)) {
		err = fmt.Errorf("reserve script answered %d values for %d acks and %d reservations", len(out), len(acks), len(into))
	}
	if len(acks) > 0 {
		var ok []bool
		if err == nil {
			ok = make([]bool, len(acks))
			for i := range ok {
				ok[i] = out[0][i] == '1'
			}
		}
		c.acksSent(acks, ok, err)
	}
	if err != nil {
		return 0, err
	}
	c.drained.Store(out[1] == "0")
	first := len(args) - len(into)
	for i, raw := range out[2:] {
		into[i] = res{token: args[first+i].(string), raw: raw}
	}
	return len(out) - 2, nil
}

// evalAgain runs s with EVAL when cmd, its EVALSHA, found the script gone from Redis's
// cache (a restart, a SCRIPT FLUSH); else it returns cmd.
func evalAgain(ctx context.Context, c goredis.Scripter, s *goredis.Script, cmd *goredis.Cmd, keys []string, args []any) *goredis.Cmd {
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return s.Eval(ctx, c, keys, args...)
	}
	return cmd
}

// Decode unwraps the element: a frame's body and headers (default layout), or the job
// with the headers kept in the header hash (Laravel). The body is the one copy of the
// element; the reservation keeps the element as reserved, for its settle.
func (c *consumer) Decode(r res, d *transport.Delivery) {
	d.Body, d.Headers = c.t.unwrap(r.raw, r.hdr)
}

// IsRetryable reports whether a reserve that failed may be tried again: always, but
// once the client was closed.
func (c *consumer) IsRetryable(err error) bool { return !errors.Is(err, goredis.ErrClosed) }

// Ack removes the reservation (the settle script, in one call with the acks and
// rewinds other workers of the consumer make meanwhile), or defers the removal to the
// next reserve call ([WithDeferredAcks]).
func (c *consumer) Ack(ctx context.Context, r res) error {
	if c.t.ackLinger > 0 {
		c.mu.Lock()
		if !c.closed { // Close sends the deferred acks it finds
			c.acks = append(c.acks, r)
			if len(c.acks) == 1 {
				if c.ackTimer == nil {
					c.ackTimer = time.AfterFunc(c.t.ackLinger, c.flushAcks)
				} else {
					c.ackTimer.Reset(c.t.ackLinger)
				}
			}
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
	if err == nil && !ok[0] {
		err = c.lost()
	}
	return err // the kit makes any other error a *transport.SettleWriteError
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
	for from := 0; from < len(items); from += maxGroup {
		group := items[from:min(from+maxGroup, len(items))]
		if _, err := c.runSettle(ctx, group); err != nil {
			errs = append(errs, err)
			failed += len(group)
		}
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
	c.mu.Unlock()
	c.flushes.Wait() // a flush the timer started finishes first
	if err := c.sendAcks(ctx); err != nil {
		return fmt.Errorf("%w (their messages come back after retry_after)", err)
	}
	return nil
}

// acksWaiting reports whether deferred acks wait to ride with a reserve call.
func (c *consumer) acksWaiting() bool {
	if c.t.ackLinger == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acks) > 0
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

// flushAcks sends the deferred acks no reserve call has carried within the linger.
func (c *consumer) flushAcks() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.flushes.Add(1) // before Close marks the consumer closed: Close waits for it
	c.mu.Unlock()
	defer c.flushes.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.sendAcks(ctx)
}

// sendAcks sends the deferred acks waiting, in one settle script call.
func (c *consumer) sendAcks(ctx context.Context) error {
	c.mu.Lock()
	acks := c.takeAcksLocked()
	c.mu.Unlock()
	if len(acks) == 0 {
		return nil
	}
	ok, err := c.runSettle(ctx, ackItems(acks))
	c.acksSent(acks, ok, err)
	if err != nil {
		return fmt.Errorf("redis: sending %d deferred ack(s) on %q: %w", len(acks), c.queue, err)
	}
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
		if cl.err = err; err == nil {
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
	ok, err := gates(c.t.runScript(ctx, settle, keys, args...).Int64Slice())
	if err == nil && len(ok) != len(items) {
		err = fmt.Errorf("settle script answered %d results for %d reservations", len(ok), len(items))
	}
	return ok, err
}

// gates reads the settle script's answer: per reservation, whether its gate passed.
func gates(vals []int64, err error) ([]bool, error) {
	if err != nil {
		return nil, err
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
	nw := 0
	for _, it := range items {
		nw += len(it.writes)
	}
	keys := append(make([]string, 0, 4+2*nw), c.skeys...)
	args := make([]any, 1, 1+4*len(items)+4*nw)
	args[0] = "d"
	if t.laravel {
		args[0] = "l"
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
