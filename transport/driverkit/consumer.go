package driverkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Consumer is a [transport.Consumer] built on a [Driver]: the kit's receive loop,
// settlement, pipelining and Close around the driver's broker primitives. A driver's
// Consume returns one from [New]. It is safe for concurrent use.
type Consumer[M any] struct {
	d       Driver[M]
	w       Writer[M]      // nil with AtomicAcks
	async   AsyncWriter[M] // the pipelined writes' writer when the driver has one; else nil
	atomic  AtomicAcker[M] // nil without AtomicAcks
	handOff HandOffer[M]   // nil without HandOff
	cfg     Config
	book    *Ledger[M]
	failed  func(*transport.Delivery, transport.Settlement, error) // ConsumeOptions.SettleFailed
	pipe    chan struct{}                                          // a token per pipelined settlement in flight; nil when not pipelined
	pipeW   bool                                                   // Acks with writes are pipelined (Config.Pipeline)
	pipeA   bool                                                   // Acks without writes are pipelined (Config.PipelineAcks)
	direct  bool                                                   // ConcurrentReceive with batches of one: no buffer
	busy    gate                                                   // receives and settlements in progress, for Close
	retry   retrier                                                // the backoff of failed receives

	// Batched receiving (not direct): messages received beyond the first of a batch
	// wait in ready, each holding its slot, for the next Receive calls.
	mu       sync.Mutex
	ready    []*item[M]    // oldest first
	fetching int           // Driver.Receive calls in progress
	wake     chan struct{} // closed when ready grows or a fetch ends; nil while nobody waits
	bufs     sync.Pool     // *[]M of MaxBatch, the receive buffers

	life         context.Context // ends when Close begins: see Bind
	endLife      context.CancelFunc
	closing      atomic.Bool
	driverClosed atomic.Bool   // Driver.Close was called
	closed       chan struct{} // closed once Close finished
}

// item is one delivery: what the runtime gets and its ledger entry, in one allocation.
type item[M any] struct {
	d   transport.Delivery
	e   Entry[M]
	got [1]M // the receive target of a direct receive
}

// New returns the consumer of one queue built on d, with cfg its facts and opts the
// runtime's options (prefetch, transactional, the SettleFailed callback). It checks
// that d implements the primitives cfg asks for: [Writer] (or [AtomicAcker] with
// AtomicAcks) and [HandOffer] with HandOff. A driver keeps the Consumer to watch
// [Consumer.Done] in its Receive.
func New[M any](d Driver[M], cfg Config, opts transport.ConsumeOptions) (*Consumer[M], error) {
	if d == nil || cfg.Broker == "" {
		return nil, errors.New("driverkit: New needs a driver and Config.Broker")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.MaxBatch = max(cfg.MaxBatch, 1)
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = DefaultConfirmTimeout
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	prefetch := max(opts.Prefetch, 1)
	c := &Consumer[M]{
		d:      d,
		cfg:    cfg,
		failed: opts.SettleFailed,
		direct: cfg.ConcurrentReceive && cfg.MaxBatch == 1,
		closed: make(chan struct{}),
	}
	c.retry.cfg = &c.cfg
	c.life, c.endLife = context.WithCancel(context.Background())
	c.busy.zero = make(chan struct{}, 1)
	outcomes := []transport.Outcome{transport.Ack, transport.Rewind}
	var ok bool
	if cfg.HandOff {
		if c.handOff, ok = d.(HandOffer[M]); !ok {
			return nil, fmt.Errorf("driverkit: %s: Config.HandOff is set but %T has no HandOff method", cfg.Broker, d)
		}
		outcomes = append(outcomes, transport.HandOff)
	}
	if cfg.AtomicAcks {
		if c.atomic, ok = d.(AtomicAcker[M]); !ok {
			return nil, fmt.Errorf("driverkit: %s: Config.AtomicAcks is set but %T has no AckWrites method", cfg.Broker, d)
		}
	} else if c.w, ok = d.(Writer[M]); !ok {
		return nil, fmt.Errorf("driverkit: %s: %T has neither a Write method nor Config.AtomicAcks", cfg.Broker, d)
	}
	c.pipeW = cfg.Pipeline && !cfg.AtomicAcks && !opts.Transactional
	c.pipeA = cfg.PipelineAcks && !opts.Transactional
	if c.pipeW || c.pipeA {
		depth := cfg.PipelineDepth
		if depth <= 0 {
			depth = max(prefetch, DefaultPipelineDepth)
		}
		c.pipe = make(chan struct{}, depth)
		c.async, _ = d.(AsyncWriter[M])
	}
	c.bufs.New = func() any {
		b := make([]M, cfg.MaxBatch)
		return &b
	}
	c.book = NewLedger[M](LedgerConfig{Broker: cfg.Broker, Queue: cfg.Queue, Prefetch: prefetch, Outcomes: outcomes,
		Logger: cfg.Logger, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff})
	if cfg.Group != nil {
		if err := cfg.Group.Add(c); err != nil {
			c.endLife()
			return nil, err
		}
	}
	return c, nil
}

// Done is closed when the consumer starts closing: a driver's Receive returns then.
func (c *Consumer[M]) Done() <-chan struct{} { return c.book.Done() }

// Bind returns a context that ends when ctx ends or when the consumer starts closing,
// for a [Driver.Receive] whose broker client waits on a context only. Call cancel when
// the call returns.
func (c *Consumer[M]) Bind(ctx context.Context) (context.Context, context.CancelFunc) {
	bound, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel)
	return bound, func() {
		stop()
		cancel()
	}
}

// Held counts the deliveries held: handed out (or received and waiting to be) and not
// finished.
func (c *Consumer[M]) Held() int { return c.book.Held() }

// SettlesAtomically reports whether Ack settlements make their writes and the
// acknowledgement in one atomic step ([Config.AtomicAcks]); see
// [transport.AtomicSettler].
func (c *Consumer[M]) SettlesAtomically() bool { return c.atomic != nil }

// Unsettled returns the messages handed out (or waiting to be) and not finished,
// oldest first, being settled or not, for which keep returns true (every one when keep
// is nil): a driver that keeps a broker-side lease alive while a message is held (an
// SQS visibility timeout, a Service Bus lock) renews these.
func (c *Consumer[M]) Unsettled(keep func(M) bool) []M {
	es := c.book.Unsettled(keep)
	out := make([]M, len(es))
	for i, e := range es {
		out[i] = e.Value
	}
	return out
}

// TakeBack records that the broker took back, on its own, the held messages for
// which keep returns true (a revoked partition, a lapsed reservation): their slots are
// freed and a later Settle of one fails with cause, which should be a
// [*transport.TakenBackError]. Messages being settled find out for themselves. It
// returns how many it took back.
func (c *Consumer[M]) TakeBack(keep func(M) bool, cause error) int {
	es := c.book.Open(keep)
	for _, e := range es {
		c.book.TakeBack(e, cause)
	}
	return len(es)
}

// Receive returns the next delivery once a prefetch slot is free (and the backoff
// after failed settlements is over). Retryable receive failures are retried after a
// backoff that doubles from [Config.MinBackoff] to [Config.MaxBackoff] and is logged
// at the first failure and at each doubling of their count; other failures are
// returned. It returns ctx.Err() when ctx ends and [transport.ErrClosed] once the
// consumer closes.
func (c *Consumer[M]) Receive(ctx context.Context) (*transport.Delivery, error) {
	c.busy.enter()
	defer c.busy.exit()
	if c.direct {
		return c.receiveOne(ctx)
	}
	return c.receiveBatched(ctx)
}

// receiveOne is Receive with concurrent receives of one message: each caller receives
// for itself, into its delivery's own allocation.
func (c *Consumer[M]) receiveOne(ctx context.Context) (*transport.Delivery, error) {
	for {
		if err := c.book.Acquire(ctx); err != nil {
			return nil, err
		}
		it := new(item[M])
		n, err := c.d.Receive(ctx, it.got[:])
		if n > 0 {
			m := it.got[0]
			var zero M
			it.got[0] = zero
			c.retry.succeeded()
			return c.hand(ctx, it, m, nil)
		}
		c.book.Unacquire()
		if err = c.receiveFailed(ctx, err); err != nil {
			return nil, err
		}
	}
}

// receiveBatched is Receive when the driver returns batches or takes one Receive call
// at a time: a caller takes a message waiting from an earlier batch, or receives the
// next batch itself, or waits for the caller that does.
func (c *Consumer[M]) receiveBatched(ctx context.Context) (*transport.Delivery, error) {
	if err := c.book.Pause(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	for {
		select {
		case <-c.book.Done():
			c.mu.Unlock()
			return nil, transport.ErrClosed
		default:
		}
		if len(c.ready) > 0 {
			it := c.ready[0]
			c.ready[0] = nil
			c.ready = c.ready[1:]
			c.mu.Unlock()
			return &it.d, nil
		}
		if c.fetching == 0 || c.cfg.ConcurrentReceive {
			c.fetching++
			c.mu.Unlock()
			d, err := c.fetch(ctx)
			c.mu.Lock()
			c.fetching--
			c.signalLocked()
			c.mu.Unlock()
			return d, err
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.book.Done():
			return nil, transport.ErrClosed
		}
		c.mu.Lock()
	}
}

// signalLocked wakes the Receive calls waiting for a batch. c.mu is held.
func (c *Consumer[M]) signalLocked() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// fetch receives one batch: a slot for the caller's message, and as many more as are
// free, up to MaxBatch; the first message is the caller's, the others wait in ready.
func (c *Consumer[M]) fetch(ctx context.Context) (*transport.Delivery, error) {
	for {
		if err := c.book.Acquire(ctx); err != nil {
			return nil, err
		}
		n := 1
		for n < c.cfg.MaxBatch && c.book.TryAcquire() {
			n++
		}
		bp := c.bufs.Get().(*[]M)
		buf := (*bp)[:n]
		got, err := c.d.Receive(ctx, buf)
		got = min(max(got, 0), n)
		for range n - got {
			c.book.Unacquire()
		}
		if got == 0 {
			c.bufs.Put(bp)
			if err = c.receiveFailed(ctx, err); err != nil {
				return nil, err
			}
			continue
		}
		c.retry.succeeded()
		first, err := c.hand(ctx, new(item[M]), buf[0], buf[1:got])
		if err == nil && got > 1 {
			c.handRest(ctx, buf[1:got])
		}
		clear(buf)
		c.bufs.Put(bp)
		return first, err
	}
}

// handRest records the messages of a batch beyond the first and puts them in ready.
func (c *Consumer[M]) handRest(ctx context.Context, ms []M) {
	items := make([]*item[M], 0, len(ms))
	for i, m := range ms {
		it := new(item[M])
		if _, err := c.hand(ctx, it, m, ms[i+1:]); err != nil {
			break // closed: hand gave back this message and the rest
		}
		items = append(items, it)
	}
	c.mu.Lock()
	c.ready = append(c.ready, items...)
	c.signalLocked()
	c.mu.Unlock()
}

// hand records m, received under a slot, in the ledger and returns its delivery. When
// the consumer closed meanwhile it gives back m and rest (received under slots of their
// own, which it frees) and returns [transport.ErrClosed].
func (c *Consumer[M]) hand(ctx context.Context, it *item[M], m M, rest []M) (*transport.Delivery, error) {
	it.d.Queue = c.cfg.Queue
	c.d.Decode(m, &it.d)
	it.d.Handle = &it.e
	if err := c.book.HandInto(&it.e, m); err != nil {
		for range rest {
			c.book.Unacquire()
		}
		back := append([]M{m}, rest...)
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ConfirmTimeout)
		defer cancel()
		if gerr := c.d.GiveBack(gctx, back, Closing); gerr != nil {
			c.cfg.Logger.Warn(c.cfg.Broker+": cannot give back messages received while the consumer closed; the broker redelivers them after its own timeout",
				"queue", c.cfg.Queue, "messages", len(back), "error", gerr)
		}
		return nil, err
	}
	return &it.d, nil
}

// receiveFailed decides what follows a Driver.Receive that returned no message: nil to
// receive again after the backoff, or the error for the caller.
func (c *Consumer[M]) receiveFailed(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	select {
	case <-c.book.Done():
		return transport.ErrClosed
	default:
	}
	if err == nil {
		err = fmt.Errorf("%s: the driver's Receive returned no message and no error", c.cfg.Broker)
	} else if !c.d.IsRetryable(err) {
		return err
	}
	return c.retry.wait(ctx, err, c.book.Done())
}

// Settle finishes d with s (see [transport.Consumer]): validation and settle-once by
// the ledger, then the driver's primitives. A Rewind is [Driver.GiveBack] with
// [Rewound] ([SettleFailed] after a failed Ack); a HandOff is [HandOffer.HandOff]; an
// Ack without writes is [Driver.Ack]. An Ack with writes is [AtomicAcker.AckWrites],
// or [Writer.Write], then [Confirm], then [Driver.Ack] (pipelined: Settle returns after
// Write and the rest follows in the background; with [Config.PipelineAcks] an Ack
// without writes is made in the background too). A write that fails is returned as a
// [*transport.SettleWriteError] and nothing is acknowledged.
func (c *Consumer[M]) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	c.busy.enter()
	defer c.busy.exit()
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	if s.Outcome == transport.Ack && (c.pipeW && len(s.Writes) > 0 || c.pipeA && len(s.Writes) == 0) {
		if err := c.settlePipelined(ctx, e.Value, d, s); err != nil {
			return c.book.Finish(e, s, err)
		}
		c.book.FinishPending(e) // the outcome comes later: SettleSucceeded or SettleFailed
		return nil
	}
	return c.book.Finish(e, s, c.settle(ctx, e, s))
}

func (c *Consumer[M]) settle(ctx context.Context, e *Entry[M], s transport.Settlement) error {
	m := e.Value
	switch {
	case s.Outcome == transport.Rewind:
		why := Rewound
		if e.AckFailed() {
			why = SettleFailed
		}
		return c.d.GiveBack(ctx, []M{m}, why)
	case s.Outcome == transport.HandOff:
		return c.handOff.HandOff(ctx, m)
	case len(s.Writes) == 0:
		return c.d.Ack(ctx, m)
	case c.atomic != nil:
		return writeErr(c.atomic.AckWrites(ctx, m, s.Writes), s.Writes)
	}
	confirm, err := c.w.Write(ctx, m, s.Writes)
	if err == nil && confirm != nil {
		err = confirm(ctx)
	}
	if err != nil {
		return writeErr(err, s.Writes)
	}
	return c.d.Ack(ctx, m)
}

// writeErr makes err, the failure of settle writes ws, a *transport.SettleWriteError
// naming the first write's queue, unless it is one already, says the delivery was
// taken back, or there were no writes.
func writeErr(err error, ws []*transport.Message) error {
	if err == nil || len(ws) == 0 || errors.Is(err, transport.ErrAlreadySettled) {
		return err
	}
	var swe *transport.SettleWriteError
	if errors.As(err, &swe) {
		return err
	}
	return &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
}

// Close stops the consumer, bounded by ctx. It always does every step: it stops
// receiving (Receive calls return [transport.ErrClosed]), gives back the deliveries
// handed out and not settled, and those received and not handed out ([Closing]), waits
// for the receives and settlements in progress (pipelined ones included: their
// deliveries are acknowledged once their writes are confirmed), then closes the
// driver's side. It returns nil, or one error that joins every step that failed: the
// give-back, the wait that ctx ended (matching ctx.Err(): those deliveries are
// delivered again), the driver's Close. Close never logs: the caller reports its
// error. A second Close waits for the first, bounded by its own ctx, and returns nil.
func (c *Consumer[M]) Close(ctx context.Context) error {
	if !c.closing.CompareAndSwap(false, true) {
		select {
		case <-c.closed:
		case <-ctx.Done():
		}
		return nil
	}
	defer close(c.closed)
	open := c.book.Close() // Receive calls waiting return now; the ready ones are in open
	c.endLife()
	c.mu.Lock()
	clear(c.ready)
	c.ready = nil
	c.signalLocked()
	c.mu.Unlock()
	var errs []error
	if len(open) > 0 {
		if err := c.d.GiveBack(ctx, open, Closing); err != nil {
			errs = append(errs, fmt.Errorf("giving back %d unsettled deliveries: %w", len(open), err))
		}
	}
	if n, ok := c.busy.wait(ctx); !ok {
		errs = append(errs, fmt.Errorf("%d receives or settlements still in progress when the close ended (%w); their deliveries are delivered again", n, ctx.Err()))
	}
	c.driverClosed.Store(true)
	if err := c.d.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if c.cfg.Group != nil {
		c.cfg.Group.Remove(c)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: closing the consumer of %q: %w", c.cfg.Broker, c.cfg.Queue, errors.Join(errs...))
	}
	return nil
}

// gate counts the receives and settlements in progress so that Close can wait for
// them; after wait began, the last to leave tells it.
type gate struct {
	n       atomic.Int64
	waiting atomic.Bool
	zero    chan struct{} // capacity 1
}

func (g *gate) enter() { g.n.Add(1) }

func (g *gate) exit() {
	if g.n.Add(-1) == 0 && g.waiting.Load() {
		select {
		case g.zero <- struct{}{}:
		default:
		}
	}
}

// wait returns once nothing is in progress (0, true), or when ctx ends with how many
// still are (n, false).
func (g *gate) wait(ctx context.Context) (int64, bool) {
	g.waiting.Store(true)
	for {
		n := g.n.Load()
		if n <= 0 {
			return 0, true
		}
		select {
		case <-g.zero:
		case <-ctx.Done():
			return g.n.Load(), false
		}
	}
}
