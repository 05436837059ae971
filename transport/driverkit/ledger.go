package driverkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Default backoff bounds of a consumer whose settlements fail.
const (
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = 2 * time.Second
)

// ErrForeign matches a Settle of a delivery another consumer (or no consumer) handed out.
var ErrForeign = errors.New("delivery does not belong to this consumer")

// LedgerConfig describes the consumer a ledger keeps the account of.
type LedgerConfig struct {
	// Broker names the driver ("redis"), for errors and log lines.
	Broker string
	// Queue is the queue consumed, for errors and log lines.
	Queue string
	// Prefetch is the most deliveries handed out and not finished. Less than 1 means 1.
	Prefetch int
	// Outcomes are the outcomes the driver offers. Default: Ack and Rewind.
	Outcomes []transport.Outcome
	// Logger receives the settle-failure lines. Default slog.Default().
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait after failed settlements. Defaults
	// [DefaultMinBackoff] and [DefaultMaxBackoff].
	MinBackoff, MaxBackoff time.Duration
}

type state uint8

const (
	open      state = iota // handed out, not being settled
	settling               // a Settle is in progress
	settled                // finished: settled, rewound, or its settle finally failed
	givenBack              // returned by Close
	takenBack              // the broker took it back (TakeBack)
)

// Entry is one delivery handed out. The driver puts the entry in
// [transport.Delivery.Handle] and keeps its own bookkeeping in Value.
type Entry[H any] struct {
	// Value is the driver's bookkeeping for the delivery (a delivery tag, a receipt).
	Value H

	l          *Ledger[H]
	prev, next *Entry[H] // the ledger's list of held entries, oldest first; guarded by l.mu
	held       bool      // in the list, holding a slot; guarded by l.mu
	state      state     // guarded by l.mu
	cause      error     // takenBack: the error a Settle returns; guarded by l.mu
	failed     bool      // an Ack of it failed: its Rewind is no recovery; guarded by l.mu
}

// Ledger is one consumer's account of the deliveries it handed out and not yet
// finished. [Consumer] is built on it; a driver whose broker hands out deliveries in a
// way Consumer cannot drive (see the package documentation) keeps one itself.
//
// A Ledger does four things, the same way on every broker:
//
//   - Prefetch slots. A delivery holds one slot from the moment it is handed out until it
//     is settled, rewound, given back on Close, taken back by the broker, or its settle
//     finally fails. The slot is freed exactly once. No more than the prefetch are held.
//     A Rewind (or HandOff) that fails still frees the slot: the message is left to the
//     broker's own redelivery (a visibility timeout, a reservation that lapses, a closed
//     channel), so a broker outage can never eat the prefetch.
//   - Settle once. Each delivery is an [Entry] that moves open → settling → settled. A
//     second Settle, or one racing the first, fails with [transport.ErrAlreadySettled];
//     an Ack whose settle failed goes back to open, so the runtime can Rewind it.
//   - Settlement validation ([Validate]): writes only with Ack, every write non-nil
//     with a queue, and only the outcomes the driver offers.
//   - Give-back on Close: [Ledger.Close] returns the entries still open, for the driver
//     to give back to the broker; a later Settle of one of them fails with an error
//     matching both [transport.ErrClosed] and [transport.ErrAlreadySettled].
//
// And it slows a consumer whose settlements keep failing: after each failed settle the
// next [Ledger.Acquire] (or [Ledger.Pause]) waits a backoff that doubles from 50 ms to
// 2 s (by default) while failures go on, and the failures are logged with their cause
// (at the first one and at each doubling of their count, not once per message).
//
// A Ledger is safe for concurrent use. It never calls into the driver while it holds
// its lock, so a driver may call it with its own lock held.
type Ledger[H any] struct {
	cfg      LedgerConfig
	outcomes []transport.Outcome
	slots    chan struct{} // one token per delivery held or slot reserved by Acquire
	done     chan struct{} // closed by Close

	mu         sync.Mutex
	head, tail *Entry[H] // the held entries, in hand-out order
	n          int       // len of the list
	closed     bool

	failures   int          // settle failures in a row; guarded by mu
	pauseUntil atomic.Int64 // Unix ns: Acquire and Pause wait until then; 0 when not paused
}

// NewLedger returns an empty ledger.
func NewLedger[H any](cfg LedgerConfig) *Ledger[H] {
	cfg.Prefetch = max(cfg.Prefetch, 1)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	outcomes := cfg.Outcomes
	if len(outcomes) == 0 {
		outcomes = []transport.Outcome{transport.Ack, transport.Rewind}
	}
	return &Ledger[H]{
		cfg:      cfg,
		outcomes: slices.Clone(outcomes),
		slots:    make(chan struct{}, cfg.Prefetch),
		done:     make(chan struct{}),
	}
}

// Prefetch returns the number of slots.
func (l *Ledger[H]) Prefetch() int { return l.cfg.Prefetch }

// Done is closed when the ledger closes.
func (l *Ledger[H]) Done() <-chan struct{} { return l.done }

// Held counts the deliveries handed out and not finished.
func (l *Ledger[H]) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Room counts the free slots: the prefetch less the deliveries held and the slots
// Acquire granted and Hand has not used.
func (l *Ledger[H]) Room() int { return cap(l.slots) - len(l.slots) }

// Acquire waits for a free slot and for the backoff after failed settlements, then
// reserves the slot for the delivery the caller is about to hand out with [Ledger.Hand]
// (or gives back with [Ledger.Unacquire]). It returns ctx.Err() when ctx ends and
// [transport.ErrClosed] once the ledger is closed.
func (l *Ledger[H]) Acquire(ctx context.Context) error {
	if err := l.Pause(ctx); err != nil {
		return err
	}
	select {
	case <-l.done:
		return transport.ErrClosed
	default:
	}
	// A free slot is taken without the three-way select (a select with one case and a
	// default costs a fraction of it): the common case of a consumer under its prefetch.
	select {
	case l.slots <- struct{}{}:
		return nil // a Hand after a Close that comes now frees it again
	default:
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return transport.ErrClosed
	}
}

// TryAcquire reserves a free slot when there is one, without waiting (and without the
// backoff [Ledger.Acquire] waits out), and reports whether it did: for a driver that
// receives a batch, the slots beyond the first.
func (l *Ledger[H]) TryAcquire() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Pause waits out the backoff after failed settlements, for drivers that do not use
// [Ledger.Acquire]. It returns ctx.Err() when ctx ends, and [transport.ErrClosed] when
// the ledger closes while it waits.
func (l *Ledger[H]) Pause(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return waitUntil(ctx, l.pauseUntil.Load(), l.done)
}

// waitUntil waits until the Unix time until (in nanoseconds; 0, or a time gone by, is no
// wait). It returns ctx.Err() when ctx ends first, and [transport.ErrClosed] when done
// closes first.
func waitUntil(ctx context.Context, until int64, done <-chan struct{}) error {
	if until == 0 {
		return nil // the common case: no settle failing
	}
	wait := time.Until(time.Unix(0, until))
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return transport.ErrClosed
	}
}

// Receive is the Receive of a driver that hands out one delivery per call: it waits for
// a free slot ([Ledger.Acquire]), calls receive, and frees the slot again when receive
// fails. receive builds the delivery with [Ledger.Hand].
func (l *Ledger[H]) Receive(ctx context.Context, receive func(context.Context) (*transport.Delivery, error)) (*transport.Delivery, error) {
	if err := l.Acquire(ctx); err != nil {
		return nil, err
	}
	d, err := receive(ctx)
	if err != nil {
		l.Unacquire()
	}
	return d, err
}

// free gives one slot token back.
func (l *Ledger[H]) free() {
	select {
	case <-l.slots:
	default:
	}
}

// Unacquire gives back a slot [Ledger.Acquire] granted when no delivery was handed out
// under it (the receive failed or ctx ended).
func (l *Ledger[H]) Unacquire() { l.free() }

// Hand records v as handed out under the slot [Ledger.Acquire] granted. When the
// ledger closed meanwhile it frees the slot and returns [transport.ErrClosed]: the
// driver gives v back to the broker itself.
func (l *Ledger[H]) Hand(v H) (*Entry[H], error) {
	e := new(Entry[H])
	if err := l.HandInto(e, v); err != nil {
		return nil, err
	}
	return e, nil
}

// HandInto is [Ledger.Hand] recording v in e, a zero Entry the driver allocated itself,
// typically in one struct with the [transport.Delivery] that carries it, so that a
// delivery costs one allocation instead of two. An Entry is recorded once: e must be
// new.
func (l *Ledger[H]) HandInto(e *Entry[H], v H) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.free()
		return transport.ErrClosed
	}
	l.linkLocked(e, v)
	l.mu.Unlock()
	return nil
}

// Add records v as handed out without [Ledger.Acquire], for a driver that checks
// [Ledger.Room] itself. It returns [transport.ErrClosed] once the ledger is closed.
func (l *Ledger[H]) Add(v H) (*Entry[H], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, transport.ErrClosed
	}
	select {
	case l.slots <- struct{}{}:
	default: // the driver went over its room: the entry is held all the same
	}
	e := new(Entry[H])
	l.linkLocked(e, v)
	return e, nil
}

// linkLocked makes e, a new entry, the entry of v and appends it to the list of held
// entries.
func (l *Ledger[H]) linkLocked(e *Entry[H], v H) {
	*e = Entry[H]{Value: v, l: l, held: true, prev: l.tail}
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

// Withdraw takes back an open entry that never reached a caller (a hand-out to a
// Receive call that gave up), freeing its slot. It reports false when the entry is not
// open any more (Close gave it back, a Settle began).
func (l *Ledger[H]) Withdraw(e *Entry[H]) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.state != open {
		return false
	}
	e.state = settled
	l.releaseLocked(e)
	return true
}

// releaseLocked unlinks e and frees its slot, once.
func (l *Ledger[H]) releaseLocked(e *Entry[H]) {
	if !e.held {
		return
	}
	e.held = false
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
	l.free()
}

// Validate checks a settlement against the outcomes offered: writes only with Ack,
// each write non-nil with a queue. A bad settlement matches [transport.ErrBadSettlement];
// an outcome not offered matches [transport.ErrUnsupported].
func Validate(broker string, s transport.Settlement, offered ...transport.Outcome) error {
	if !slices.Contains(offered, s.Outcome) {
		return fmt.Errorf("%s: %s: %w", broker, s.Outcome, transport.ErrUnsupported)
	}
	if len(s.Writes) > 0 && s.Outcome != transport.Ack {
		return fmt.Errorf("%s: %w: settle writes are only allowed with Ack, not %s", broker, transport.ErrBadSettlement, s.Outcome)
	}
	for i, w := range s.Writes {
		if w == nil {
			return fmt.Errorf("%s: %w: settle write %d is nil", broker, transport.ErrBadSettlement, i)
		}
		if w.Queue == "" {
			return fmt.Errorf("%s: %w: settle write %d has no queue", broker, transport.ErrBadSettlement, i)
		}
	}
	return nil
}

// Begin starts settling the delivery d with s. It checks that d was handed out by this
// ledger, validates s ([Validate]) and moves the entry from open to settling. A
// delivery already settled, or being settled, fails with [transport.ErrAlreadySettled];
// one given back on Close with an error matching [transport.ErrClosed] and
// [transport.ErrAlreadySettled]; one the broker took back with its
// [transport.TakenBackError]. Every successful Begin must be followed by
// [Ledger.Finish].
func (l *Ledger[H]) Begin(d *transport.Delivery, s transport.Settlement) (*Entry[H], error) {
	var e *Entry[H]
	if d != nil {
		e, _ = d.Handle.(*Entry[H])
	}
	if e == nil || e.l != l {
		return nil, fmt.Errorf("%s: settle: %w", l.cfg.Broker, ErrForeign)
	}
	if err := Validate(l.cfg.Broker, s, l.outcomes...); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.state {
	case open:
		e.state = settling
		return e, nil
	case givenBack:
		return nil, &givenBackError{broker: l.cfg.Broker, queue: l.cfg.Queue}
	case takenBack:
		return nil, e.cause
	default:
		return nil, transport.ErrAlreadySettled
	}
}

// Finish ends the settle [Ledger.Begin] started, given the error of the driver's
// settle (nil when it succeeded), and returns that error.
//
//   - nil: the entry is settled and its slot freed.
//   - an error matching [transport.ErrAlreadySettled] (a [transport.TakenBackError]):
//     the broker took the delivery back; settled, slot freed.
//   - any other error of an Ack: nothing was acknowledged; the entry is open again and
//     keeps its slot, so the caller can settle it again (the runtime rewinds it). Once
//     the ledger is closed it is given back instead, to the broker's own redelivery.
//   - any other error of a Rewind or HandOff: the slot is freed anyway and the message
//     is left to the broker's own redelivery; a failed give-back must not hold a slot.
//
// A failure other than a taken-back delivery makes the next Acquire or Pause back off
// and is logged with its cause.
func (l *Ledger[H]) Finish(e *Entry[H], s transport.Settlement, err error) error {
	l.mu.Lock()
	if err == nil && e.state == settling && !e.failed && l.failures == 0 {
		// The common case, kept short: settled, its slot freed, nothing to log.
		e.state = settled
		l.releaseLocked(e)
		l.mu.Unlock()
		return nil
	}
	return l.finishLocked(e, s, err)
}

// FinishPending ends the settle [Ledger.Begin] started whose outcome comes later (a
// pipelined settlement whose writes are in flight): the entry is settled and its slot
// freed, and the run of failed settlements is left as it is until
// [Ledger.SettleSucceeded] or [Ledger.SettleFailed] tells how it went.
func (l *Ledger[H]) FinishPending(e *Entry[H]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.state == settling {
		e.state = settled
		l.releaseLocked(e)
	}
}

// finishLocked is Finish for every case but a plain success; l.mu is held and is
// released before it returns.
func (l *Ledger[H]) finishLocked(e *Entry[H], s transport.Settlement, err error) error {
	taken := err != nil && errors.Is(err, transport.ErrAlreadySettled)
	if e.state != settling {
		l.mu.Unlock()
		return err
	}
	switch {
	case err != nil && !taken && s.Outcome == transport.Ack && !l.closed:
		e.state = open
		e.failed = true
	default:
		e.state = settled
		l.releaseLocked(e)
	}
	switch {
	case err == nil && e.failed:
		// The Rewind of a delivery whose Ack failed: the failure has not gone away (a
		// settle write the broker keeps refusing), so the backoff keeps growing.
		l.mu.Unlock()
	case err == nil:
		l.recoveredLocked()
	case !taken:
		l.failedLocked(s.Outcome, err)
	default:
		l.mu.Unlock()
	}
	return err
}

// SettleFailed records a settlement that failed after [Ledger.Finish] reported it done
// (a pipelined settle write that the broker refused): the next Acquire or Pause backs
// off as after a failed Finish, and the failure is logged on the same terms.
func (l *Ledger[H]) SettleFailed(o transport.Outcome, err error) {
	l.mu.Lock()
	l.failedLocked(o, err)
}

// SettleSucceeded records a settlement that succeeded after [Ledger.Finish] reported it
// (the writes of a pipelined settlement confirmed): it ends the backoff of a run of
// failures, as a successful Finish does.
func (l *Ledger[H]) SettleSucceeded() {
	if l.pauseUntil.Load() == 0 {
		return // the common case: nothing failing
	}
	l.mu.Lock()
	l.recoveredLocked()
}

// failedLocked counts one more settle failure in a row, sets the backoff and logs the
// cause at the first failure of a run and at each doubling of the count. l.mu is held
// and released.
func (l *Ledger[H]) failedLocked(o transport.Outcome, err error) {
	l.failures++
	failures := l.failures
	backoff := min(l.cfg.MinBackoff<<min(failures-1, 20), l.cfg.MaxBackoff)
	l.pauseUntil.Store(time.Now().Add(backoff).UnixNano())
	l.mu.Unlock()
	if failures&(failures-1) == 0 {
		l.cfg.Logger.Warn(l.cfg.Broker+": settle failed; receiving backs off while settlements fail",
			"queue", l.cfg.Queue, "outcome", o.String(), "failures", failures, "backoff", backoff, "error", err)
	}
}

// recoveredLocked ends a run of settle failures, logging it. l.mu is held and released.
func (l *Ledger[H]) recoveredLocked() {
	failures := l.failures
	l.failures = 0
	l.pauseUntil.Store(0)
	l.mu.Unlock()
	if failures > 0 {
		l.cfg.Logger.Info(l.cfg.Broker+": settling again", "queue", l.cfg.Queue, "failed_before", failures)
	}
}

// TakeBack records that the broker took e back on its own (a revoked partition, a
// closed channel): its slot is freed and a later Settle fails with cause, which should
// be a [transport.TakenBackError]. It does nothing to an entry that is not open: a
// Settle in progress finds out for itself.
func (l *Ledger[H]) TakeBack(e *Entry[H], cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.state != open {
		return
	}
	e.state, e.cause = takenBack, cause
	l.releaseLocked(e)
}

// Open returns the entries handed out and neither settled nor being settled, oldest
// first, for which keep returns true (all of them when keep is nil).
func (l *Ledger[H]) Open(keep func(H) bool) []*Entry[H] {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Entry[H]
	for e := l.head; e != nil; e = e.next {
		if e.state == open && (keep == nil || keep(e.Value)) {
			out = append(out, e)
		}
	}
	return out
}

// Close closes the ledger and returns the values of the entries still open, oldest
// first, for the driver to give back to the broker: their slots are freed and a later
// Settle of one fails with an error matching [transport.ErrClosed] and
// [transport.ErrAlreadySettled]. Entries being settled finish on their own. Acquire and
// Pause calls waiting return [transport.ErrClosed]. Calling Close again returns nil.
func (l *Ledger[H]) Close() []H {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.done)
	var out []H
	for e := l.head; e != nil; {
		next := e.next
		if e.state == open {
			e.state = givenBack
			out = append(out, e.Value)
			l.releaseLocked(e)
		}
		e = next
	}
	return out
}

// givenBackError is the error of a Settle after Close gave the delivery back.
type givenBackError struct{ broker, queue string }

func (e *givenBackError) Error() string {
	return fmt.Sprintf("%s: delivery from %q was given back to the broker when the consumer closed", e.broker, e.queue)
}

func (e *givenBackError) Is(target error) bool {
	return target == transport.ErrClosed || target == transport.ErrAlreadySettled
}

// SendAll makes the settle writes ws in order with send and stops at the first that
// fails, returning it as a [*transport.SettleWriteError] naming its queue: the writes
// after it are not made, the ones before it stay made (a broker without transactions
// cannot take them back; a redelivery repeats them). Drivers that can make all writes
// and the acknowledgement in one atomic step (a Redis script) do not need it.
func SendAll(ctx context.Context, ws []*transport.Message, send func(context.Context, *transport.Message) error) error {
	for _, w := range ws {
		if err := ctx.Err(); err != nil {
			return &transport.SettleWriteError{Queue: w.Queue, Err: err}
		}
		if err := send(ctx, w); err != nil {
			var swe *transport.SettleWriteError
			if errors.As(err, &swe) {
				return err
			}
			return &transport.SettleWriteError{Queue: w.Queue, Err: err}
		}
	}
	return nil
}
