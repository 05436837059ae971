package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	if t.closed.Load() {
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
	c.settles = driverkit.GroupCommit[settleItem]{Send: c.settleGroup, Lanes: groupLanes, Max: maxGroup}
	if t.ackLinger > 0 {
		c.deferred = driverkit.NewDeferredAcks(t.ackLinger, t.common.Logger, "redis", queue,
			func(ctx context.Context, rs []res) ([]bool, error) { return c.runSettle(ctx, ackItems(rs)) })
	}
	k, err := driverkit.New[res](c, driverkit.Config{
		Broker:     "redis",
		Queue:      queue,
		Logger:     t.common.Logger,
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
func (c *kitConsumer) SyncAcks(ctx context.Context) error { return c.d.deferred.Flush(ctx) }

// consumer is Redis's side of one consumer: the primitives the kit drives.
type consumer struct {
	t               *Transport
	queue, readyKey string
	rkeys, skeys    []string // the reserve and settle scripts' keys (then a settle's writes')
	kit             *driverkit.Consumer[res]
	settles         driverkit.GroupCommit[settleItem] // acks and rewinds of several workers in one call

	// drained is set when the last Receive had to wait and its reserve call left the
	// ready list empty: the next one waits first, in the same round trip (default
	// layout). A queue that keeps a worker waiting costs a round trip less per message.
	drained atomic.Bool
	// wokenLoaded is set once reserveWoken was loaded ahead of a look, so that the
	// message ending the first wait on a Redis without it in its script cache (a new
	// server, a restart) does not cost an EVAL after a NOSCRIPT answer.
	wokenLoaded atomic.Bool

	mu       sync.Mutex
	swept    time.Time                    // when a reserve call last swept
	deferred *driverkit.DeferredAcks[res] // [WithDeferredAcks]; nil: off
}

// res is one reservation, as the kit holds it.
type res struct {
	token string // the deadline member's token (its member is "<token>:<raw>"), or Laravel's reserved member
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
	if !c.drained.Load() || c.deferred.Waiting() { // else the look goes first: the queue is idle
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
// a blocking look of up to wait goes first, in the same pipeline ([consumer.wake] in the
// default layout); else the script sweeps at most every [sweepEvery] and the deferred
// acks ride along: in the reserve script itself (default layout), or in a settle script
// ahead of Laravel's reserve script, which stays as Laravel has it.
func (c *consumer) reserve(ctx context.Context, into []res, wait time.Duration) (int, error) {
	t := c.t
	now := time.Now()
	var acks []res
	c.mu.Lock()
	sweep := now.Sub(c.swept) >= min(sweepEvery, t.poll)
	if sweep {
		c.swept = now
	}
	if wait == 0 {
		acks = c.deferred.Take()
	}
	c.mu.Unlock()
	if wait > 0 && !t.laravel {
		return c.wake(ctx, into, wait, now, sweep)
	}

	script, keys, args := reserveDefault, c.rkeys, []any(nil)
	if t.laravel {
		score, migrate := "+inf", "0"
		if t.retryAfter > 0 {
			score, migrate = strconv.FormatInt(now.Add(t.retryAfter).Unix(), 10), "1"
		}
		script = reserveLaravel
		args = []any{strconv.FormatInt(now.Unix(), 10), score, len(into), migrate}
	} else {
		sweepArg := "0"
		if sweep {
			sweepArg = "1"
		}
		args = make([]any, 0, 5+2*len(acks)+len(into))
		args = append(args, scoreAt(now), t.deadline(now), sweepLimit, sweepArg, len(acks))
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
	} else { // Laravel
		pipe := t.client.Pipeline()
		if wait > 0 {
			look = pipe.Do(ctx, "blmove", c.readyKey, c.readyKey, "LEFT", "LEFT", strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
		}
		if len(acks) > 0 {
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
		c.deferred.Sent(acks, ok, err)
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
	if err == nil && (len(out) < 1 || len(out[0]) != len(acks) || len(out)-1 > len(into)) {
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
		c.deferred.Sent(acks, ok, err)
	}
	if err != nil {
		return 0, err
	}
	c.drained.Store(false)
	first := len(args) - len(into)
	for i, raw := range out[1:] {
		into[i] = res{token: args[first+i].(string), raw: raw}
	}
	return len(out) - 1, nil
}

// wake waits up to wait for the ready list with the blocking look and reserves behind
// it in the same pipeline (default layout): a due sweep goes ahead of the look, so that
// a message ending the wait meets only reserveWoken, the least the layout asks of a
// reservation, and reaches the worker in the answer to that one round trip.
func (c *consumer) wake(ctx context.Context, into []res, wait time.Duration, now time.Time, sweep bool) (int, error) {
	t := c.t
	args := make([]any, 1, 1+len(into))
	args[0] = t.deadline(now)
	for range into {
		args = append(args, t.token())
	}
	keys := c.rkeys[:3]
	pipe := t.client.Pipeline()
	var sw *goredis.Cmd
	var sargs []any
	if sweep { // the reserve script with no tokens only sweeps
		sargs = []any{scoreAt(now), args[0], sweepLimit, "1", 0}
		sw = pipe.EvalSha(ctx, reserveDefault.Hash(), c.rkeys, sargs...)
	}
	var load *goredis.StringCmd
	if !c.wokenLoaded.Load() && !t.cluster { // a Cluster pipeline sends a keyless command anywhere
		load = pipe.ScriptLoad(ctx, reserveWokenSource)
	}
	look := pipe.Do(ctx, "blmove", c.readyKey, c.readyKey, "LEFT", "LEFT", strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
	rc := pipe.EvalSha(ctx, reserveWoken.Hash(), keys, args...)
	_, _ = pipe.Exec(ctx)
	if load != nil && load.Err() == nil {
		c.wokenLoaded.Store(true)
	}
	if sw != nil && evalAgain(ctx, t.client, reserveDefault, sw, c.rkeys, sargs).Err() != nil {
		c.mu.Lock()
		c.swept = time.Time{} // due again next time
		c.mu.Unlock()
	}
	if err := look.Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, err
	}
	reply, err := evalAgain(ctx, t.client, reserveWoken, rc, keys, args).Result()
	if err != nil {
		return 0, err
	}
	if raw, ok := reply.(string); ok { // one element, and the list is empty now
		into[0] = res{token: args[1].(string), raw: raw}
		c.drained.Store(true)
		return 1, nil
	}
	out, ok := reply.([]any)
	if !ok {
		return 0, fmt.Errorf("reserve script answered a %T", reply)
	}
	n, left := len(out), int64(0)
	if n > len(into) { // every token used: the list's length follows
		n--
		left, ok = out[n].(int64)
	}
	if !ok || n > len(into) {
		return 0, fmt.Errorf("reserve script answered %d values for %d reservations", len(out), len(into))
	}
	for i := range n {
		raw, ok := out[i].(string)
		if !ok {
			return 0, fmt.Errorf("reserve script answered a %T for a reservation", out[i])
		}
		into[i] = res{token: args[1+i].(string), raw: raw}
	}
	c.drained.Store(left == 0) // the next Receive looks first
	return n, nil
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
// with the headers kept in the header hash (Laravel).
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
	if c.deferred.Add(r) { // false once closed: Close sends the deferred acks it finds
		return nil
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
	for group := range slices.Chunk(items, maxGroup) {
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
	cl := &driverkit.GroupCall[settleItem]{Arg: it}
	c.settles.Do(ctx, cl)
	switch {
	case cl.Err != nil:
		return fmt.Errorf("redis: %s on %q: %w", o, c.queue, cl.Err)
	case !cl.OK:
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
	if err := c.deferred.Close(ctx); err != nil {
		return fmt.Errorf("%w (their messages come back after retry_after)", err)
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

// settleGroup runs the settle script for a group of Settle calls.
func (c *consumer) settleGroup(ctx context.Context, calls []*driverkit.GroupCall[settleItem]) {
	items := make([]settleItem, len(calls))
	for i, cl := range calls {
		items[i] = cl.Arg
	}
	ok, err := c.runSettle(ctx, items)
	for i, cl := range calls {
		if cl.Err = err; err == nil {
			cl.OK = ok[i]
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
	keys := c.skeys // go-redis copies the keys into the command: no writes, no copy
	if nw > 0 {
		keys = append(make([]string, 0, len(c.skeys)+2*nw), c.skeys...)
	}
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
			op := t.writeOp(w, now)
			if err := t.common.CheckSize(w.Queue, len(op.value), 0); err != nil {
				return nil, nil, &transport.SettleWriteError{Queue: w.Queue, Err: err}
			}
			keys = append(keys, op.keys...)
			args = append(args, op.op, op.score, op.value, op.hdr)
		}
	}
	return keys, args, nil
}
