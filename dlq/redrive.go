package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Option configures [Redrive], [Purge], [Export] and [Import]. Each option says which
// of them it applies to; the others ignore it.
type Option func(*options)

type options struct {
	max        int
	dryRun     bool
	sel        Select
	to         string
	bypass     bool
	poison     bool
	idle       time.Duration
	start      time.Duration
	settle     time.Duration
	progress   func(Progress)
	log        *slog.Logger
	export     *Writer
	commitPast bool
}

// WithMax stops once n messages were moved (Redrive), removed (Purge), exported
// (Export) or imported (Import), or, on a dry run, would be. Zero, the default, is no
// limit.
func WithMax(n int) Option { return func(o *options) { o.max = max(n, 0) } }

// WithDryRun reports what a redrive or a purge would do without changing anything:
// the dead-letter queue is browsed, not consumed, so the transport must be a
// [transport.Browser]. An import with it reads and checks the export and writes
// nothing.
func WithDryRun() Option { return func(o *options) { o.dryRun = true } }

// WithSelect takes only the messages sel selects (Redrive, Purge, Export); the others
// stay on the dead-letter queue. Default: every message (that can be redriven, for a
// redrive).
func WithSelect(sel Select) Option { return func(o *options) { o.sel = sel } }

// WithTarget moves every message to queue instead of the queue it failed on
// (dead_letter.original_queue): a sandbox to replay into, say. For [Import], every
// record goes to queue instead of the queue it was exported from.
func WithTarget(queue string) Option { return func(o *options) { o.to = queue } }

// WithBypass stamps each moved message with the replay-bypass header
// (bq-replay-bypass: 1), so that its handler can tell it is a replay
// (babelqueue.IsReplay) and skip side effects that already happened. Redrive only.
func WithBypass() Option { return func(o *options) { o.bypass = true } }

// WithPoison redrives poison messages too, as their original bytes (a wrapped body is
// unwrapped, a spliced dead_letter block cut out). By default they stay on the
// dead-letter queue: the runtime would only dead-letter them again. Redrive only: a
// purge or an export takes poison like any message its selection selects.
func WithPoison() Option { return func(o *options) { o.poison = true } }

// WithIdle ends the redrive once the dead-letter queue gave nothing for d (default 2s).
// When the transport can browse, the redrive knows how many messages it has to move
// and waits for each up to [WithStartTimeout] instead.
func WithIdle(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.idle = d
		}
	}
}

// WithStartTimeout bounds the wait for each message when a browse found work to do
// (default 30s): some brokers take seconds to start a consumer (a Kafka group join),
// and a busy one may pause.
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.start = d
		}
	}
}

// WithSettleTimeout bounds each move (the confirmed write and the acknowledgement),
// which completes even when ctx ends (default 30s).
func WithSettleTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.settle = d
		}
	}
}

// WithProgress calls fn after each message the redrive looked at, from the
// redrive's goroutine.
func WithProgress(fn func(Progress)) Option { return func(o *options) { o.progress = fn } }

// Progress is what [WithProgress]'s function is told after each message.
type Progress struct {
	// Last is the message just looked at.
	Last Item
	// Moved and Kept count the messages so far: Moved is those moved by a redrive,
	// removed by a purge, exported or imported (on a dry run: that would be); Kept is
	// those looked at and left where they are.
	Moved, Kept int
	// Planned is how many messages the redrive or purge means to take, from the
	// browse it makes first; -1 when it is not known (a transport that cannot browse,
	// a dry run, which is that browse, an export or an import).
	Planned int
}

// WithLogger logs each move or removal at debug level and trouble at warn level (default: no
// logging).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Action is what a redrive did with one message.
type Action string

// The actions of [Item].
const (
	// Moved: written, confirmed, to the target queue and removed from the DLQ.
	Moved Action = "moved"
	// WouldMove: a dry run would have moved it.
	WouldMove Action = "would_move"
	// Kept: left on the DLQ (not selected, poison, no target).
	Kept Action = "kept"
	// Removed: taken off the queue by a purge (archived first when it exports).
	Removed Action = "removed"
	// WouldRemove: a purge's dry run would have removed it.
	WouldRemove Action = "would_remove"
	// Exported: written to an export, left on the queue.
	Exported Action = "exported"
	// Imported: written back from an export, confirmed by the broker.
	Imported Action = "imported"
)

// Item is what a redrive, a purge, an export or an import did with one message.
type Item struct {
	Action  Action `json:"action"`
	ID      string `json:"id,omitempty"`
	URN     string `json:"urn,omitempty"`
	TraceID string `json:"trace_id,omitempty"`
	Reason  string `json:"reason,omitempty"`
	From    string `json:"from"`
	To      string `json:"to,omitempty"`
	// Why says why a message was kept.
	Why string `json:"why,omitempty"`
	// Bypass reports that the replay-bypass header was stamped.
	Bypass bool `json:"bypass,omitempty"`
}

// Stop says why a redrive ended.
type Stop string

// The ends of a redrive.
const (
	StopEnd         Stop = "end"         // the dead-letter queue had nothing more to look at
	StopMax         Stop = "max"         // the maximum was moved
	StopInterrupted Stop = "interrupted" // ctx ended; what was moved stays moved
	StopError       Stop = "error"       // a write or an acknowledgement failed
)

// Result counts what a redrive did.
type Result struct {
	// Queue is the dead-letter queue.
	Queue string `json:"queue"`
	// DryRun reports a dry run: nothing was changed and Moved is what would move.
	DryRun bool `json:"dry_run"`
	// Moved is the number of messages written to their target queue and removed from
	// the dead-letter queue (on a dry run: the number that would be).
	Moved int `json:"moved"`
	// Kept is the number of messages looked at and left on the dead-letter queue.
	Kept int `json:"kept"`
	// To counts the moved messages per target queue.
	To map[string]int `json:"to"`
	// Stopped says why the redrive ended.
	Stopped Stop `json:"stopped"`
	// Atomic reports that each move was one atomic step on the broker (a Redis script;
	// a RabbitMQ, Kafka or Pulsar transaction): a redrive killed at any point leaves
	// every message in exactly one of the two queues. When false, a kill between a
	// move's confirmed write and its acknowledgement leaves that one message in both.
	Atomic bool `json:"atomic"`
}

// Redrive moves dead-lettered messages from the queue from back to work: each to the
// queue it failed on (dead_letter.original_queue) or to [WithTarget]'s, with attempts
// reset to 0 and the dead_letter block removed, every other byte, the key and the
// headers kept, the replay-bypass header added with [WithBypass]. Each move is a
// settlement of the dead-letter delivery made in one broker transaction where the
// transport offers one ([transport.ConsumeOptions.Transactional]; Redis moves with one
// script): the write and the acknowledgement happen together or not at all, so a
// redrive killed at any point leaves every message in exactly one of the two queues
// ([Result.Atomic]). Elsewhere (SQS, Artemis) the write is confirmed by the broker
// before the dead-letter copy is acknowledged, so nothing is lost when a write fails or
// the process dies, but a process killed between the two leaves the one message in
// hand in both queues (the copy keeps the message's meta.id, so an idempotent handler
// runs it once).
//
// Messages that are not moved (not selected, poison without [WithPoison], no queue to
// go to) stay on the dead-letter queue with their bytes, key and headers: a consumer
// cannot skip a message, so each is written back to the end of the dead-letter queue
// (confirmed, then acknowledged), and the redrive stops when it meets the first one it
// put back. When the transport can browse ([transport.Browser]), the queue is read
// first and the redrive stops as soon as every selected message was moved, so the
// messages after the last of them are not touched at all.
//
// Do not run a redrive while a worker consumes the dead-letter queue. When ctx ends,
// the message in hand is settled and Redrive returns what it did with
// [StopInterrupted] and a nil error.
func Redrive(ctx context.Context, tr transport.Transport, from string, opts ...Option) (Result, error) {
	o := newOptions(opts)
	if from == "" {
		return Result{}, errors.New("dlq: redrive: empty dead-letter queue name")
	}
	if o.to != "" && o.to == from {
		return Result{}, fmt.Errorf("dlq: redrive: the target queue %q is the dead-letter queue itself", from)
	}
	r := newRun(o, tr, from, "redrive", Moved, WouldMove)
	r.take = func(e *Entry) ([]*transport.Message, string, string, bool) {
		m, why := r.plan(e)
		if m == nil {
			return nil, "", why, false
		}
		return []*transport.Message{m}, m.Queue, "", true
	}
	if o.dryRun {
		return r.res, r.dry(ctx)
	}
	return r.res, r.move(ctx)
}

func newOptions(opts []Option) options {
	o := options{idle: 2 * time.Second, start: 30 * time.Second, settle: 30 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// run walks a dead-letter queue and takes the messages it is asked to take off it:
// a redrive moves them to their queue, a purge removes them. The ones it does not take
// stay.
type run struct {
	o       options
	tr      transport.Transport
	from    string
	verb    string // for errors: "redrive", "purge"
	res     Result
	planned int
	// take decides what becomes of e: the writes the acknowledgement of a message
	// taken off the queue makes (none for a removal) and the queue they go to, or why
	// it stays.
	take func(e *Entry) (writes []*transport.Message, to, why string, ok bool)
	// taking, when set, is called just before a message is settled as taken; its
	// error leaves the message on the queue and stops the walk.
	taking func(e *Entry) error
	// took and would are the actions of a message taken, and of one a dry run would
	// take.
	took, would Action
	// tally counts the messages taken (or that a dry run would take).
	tally Tally
	// after is the context of what move finishes once its ctx ended (the settlement
	// in hand, the consumer's Close): it ends one settle timeout after ctx does, so
	// those steps together take no longer than that, whatever the connection does.
	after context.Context
}

func newRun(o options, tr transport.Transport, from, verb string, took, would Action) *run {
	return &run{o: o, tr: tr, from: from, verb: verb, took: took, would: would, planned: -1,
		res: Result{Queue: from, DryRun: o.dryRun, To: map[string]int{}}}
}

// plan decides what a redrive does with e: the write that moves it, or why it stays.
func (r *run) plan(e *Entry) (*transport.Message, string) {
	if r.o.sel != nil && !r.o.sel(e) {
		return nil, "not selected"
	}
	m, err := e.Redriven(r.o.to, r.o.poison, r.o.bypass)
	if err != nil {
		var nr *NotRedrivableError
		if errors.As(err, &nr) {
			return nil, nr.Why
		}
		return nil, err.Error()
	}
	return m, ""
}

func (r *run) report(e *Entry, a Action, to, why string) {
	switch a {
	case r.took, r.would:
		r.res.Moved++
		if to != "" {
			r.res.To[to]++
		}
		r.tally.Add(e)
	default:
		r.res.Kept++
	}
	if r.o.progress != nil {
		r.o.progress(Progress{
			Last: Item{
				Action: a, ID: e.ID(), URN: e.URN(), TraceID: e.TraceID(), Reason: e.Reason(),
				From: r.from, To: to, Why: why, Bypass: a != Kept && r.o.bypass,
			},
			Moved: r.res.Moved, Kept: r.res.Kept, Planned: r.planned,
		})
	}
}

func (r *run) full() bool { return r.o.max > 0 && r.res.Moved >= r.o.max }

// dry walks the dead-letter queue with a browse and reports what would be taken.
func (r *run) dry(ctx context.Context) error {
	r.res.Stopped = StopEnd
	err := transport.BrowseAll(ctx, r.tr, r.from, PageSize, func(d *transport.Delivery) bool {
		e := Read(d)
		if _, to, why, ok := r.take(e); ok {
			r.report(e, r.would, to, "")
		} else {
			r.report(e, Kept, "", why)
		}
		if r.full() {
			r.res.Stopped = StopMax
			return false
		}
		return true
	})
	if err != nil && ctx.Err() != nil {
		r.res.Stopped = StopInterrupted
		return nil
	}
	if err != nil {
		return fmt.Errorf("dlq: dry run needs a browse of %q: %w", r.from, err)
	}
	return nil
}

// count browses the dead-letter queue for the number of messages the walk will take
// (at most the maximum). ok is false when the transport cannot browse.
func (r *run) count(ctx context.Context) (n int, ok bool, err error) {
	if _, can := r.tr.(transport.Browser); !can {
		return 0, false, nil
	}
	err = transport.BrowseAll(ctx, r.tr, r.from, PageSize, func(d *transport.Delivery) bool {
		if _, _, _, take := r.take(Read(d)); take {
			n++
		}
		return r.o.max == 0 || n < r.o.max
	})
	if errors.Is(err, transport.ErrCannotPeek) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// move consumes the dead-letter queue and settles each message it takes with its
// writes (none for a removal), and each other one with a write that puts it back at
// the end of the queue.
func (r *run) move(ctx context.Context) error {
	want, known, err := r.count(ctx)
	if err != nil {
		if ctx.Err() != nil {
			r.res.Stopped = StopInterrupted
			return nil
		}
		return fmt.Errorf("dlq: %s: browse %q: %w", r.verb, r.from, err)
	}
	if known {
		r.planned = want
	}
	if known && want == 0 {
		r.res.Stopped = StopEnd
		return nil
	}
	settleQueues := []string{r.from}
	if r.o.to != "" {
		settleQueues = append(settleQueues, r.o.to)
	}
	c, err := r.tr.Consume(ctx, r.from, transport.ConsumeOptions{Prefetch: 1, SettleQueues: settleQueues, Transactional: true})
	if err != nil {
		return fmt.Errorf("dlq: %s: consume %q: %w", r.verb, r.from, err)
	}
	r.res.Atomic = transport.SettlesAtomically(c)
	after, endAfter := context.WithCancel(context.WithoutCancel(ctx))
	defer endAfter()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(r.o.settle, endAfter) })()
	r.after = after
	defer func() {
		cctx, cancel := context.WithTimeout(after, r.o.settle)
		defer cancel()
		_ = c.Close(cctx)
	}()
	putBack := map[[32]byte]int{}
	wait := r.o.idle
	if known {
		wait = max(r.o.idle, r.o.start)
	}
	for {
		if r.full() || known && r.res.Moved >= want {
			r.res.Stopped = StopMax
			if !r.full() {
				r.res.Stopped = StopEnd
			}
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		d, err := c.Receive(rctx)
		cancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				r.res.Stopped = StopInterrupted
				return nil
			case errors.Is(err, context.DeadlineExceeded):
				r.res.Stopped = StopEnd
				return nil
			}
			r.res.Stopped = StopError
			return fmt.Errorf("dlq: %s: receive from %q: %w", r.verb, r.from, err)
		}
		if !known {
			// A browse did not say how many to expect: a quiet queue is done.
			wait = r.o.idle
		}
		sum := digest(d)
		if putBack[sum] > 0 {
			// The first message put back has come round: every message after it was
			// looked at already.
			r.res.Stopped = StopEnd
			return r.settle(ctx, c, d, transport.Settlement{Outcome: transport.Rewind})
		}
		e := Read(d)
		writes, to, why, ok := r.take(e)
		if !ok {
			if err := r.settle(ctx, c, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{keep(d, e.Envelope)}}); err != nil {
				r.res.Stopped = StopError
				return fmt.Errorf("dlq: %s: keeping a message on %q: %w", r.verb, r.from, err)
			}
			putBack[sum]++
			r.report(e, Kept, "", why)
			continue
		}
		if r.taking != nil {
			if err := r.taking(e); err != nil {
				r.res.Stopped = StopError
				if rerr := r.settle(ctx, c, d, transport.Settlement{Outcome: transport.Rewind}); rerr != nil && r.o.log != nil {
					r.o.log.Warn("dlq: could not give a message back; the broker redelivers it", "queue", r.from, "err", rerr)
				}
				return fmt.Errorf("dlq: %s: %w", r.verb, err)
			}
		}
		if err := r.settle(ctx, c, d, transport.Settlement{Outcome: transport.Ack, Writes: writes}); err != nil {
			r.res.Stopped = StopError
			if to != "" {
				return fmt.Errorf("dlq: %s to %q: %w", r.verb, to, err)
			}
			return fmt.Errorf("dlq: %s from %q: %w", r.verb, r.from, err)
		}
		if r.o.log != nil {
			r.o.log.Debug("dlq: "+r.verb, "action", r.took, "from", r.from, "to", to, "urn", e.URN(), "id", e.ID())
		}
		r.report(e, r.took, to, "")
	}
}

// settle settles d, even once ctx ended, within the settle timeout (and, once ctx
// ended, within one settle timeout from then for the settlement and the Close
// together: r.after). A failed Ack is followed by a Rewind, so the delivery goes back
// to the broker at once.
func (r *run) settle(ctx context.Context, c transport.Consumer, d *transport.Delivery, s transport.Settlement) error {
	base := r.after
	if base == nil {
		base = context.WithoutCancel(ctx)
	}
	sctx, cancel := context.WithTimeout(base, r.o.settle)
	defer cancel()
	err := c.Settle(sctx, d, s)
	if err != nil && s.Outcome == transport.Ack {
		if rerr := c.Settle(sctx, d, transport.Settlement{Outcome: transport.Rewind}); rerr != nil && r.o.log != nil {
			r.o.log.Warn("dlq: could not give a message back after a failed move; the broker redelivers it", "queue", r.from, "err", rerr)
		}
	}
	if err == nil && s.Outcome == transport.Ack {
		// A move is done once the broker will not deliver the dead-letter copy again.
		if err = transport.SyncAcks(sctx, c); err != nil {
			err = fmt.Errorf("the write was made but the acknowledgement is not durable (the message may come back and be moved twice): %w", err)
		}
	}
	return err
}

// digest identifies a delivery by its body, key and headers.
func digest(d *transport.Delivery) [32]byte {
	h := sha256.New()
	var n [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	write(d.Body)
	if d.Key == nil {
		h.Write([]byte{0})
	} else {
		h.Write([]byte{1})
		write(d.Key)
	}
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		write([]byte(k))
		write([]byte(d.Headers[k]))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
