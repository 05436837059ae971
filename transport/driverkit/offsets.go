package driverkit

import (
	"log/slog"
	"time"
)

// LogState is where a record of a partitioned log stands in its consumer ([Offsets]).
type LogState uint8

// The states of a record tracked by [Offsets].
const (
	LogBuffered LogState = iota // fetched, waiting to be handed out
	LogParked                   // waiting until due (a delay the driver makes itself)
	LogHanded                   // handed out
	LogSettling                 // its settle writes are in flight
	LogSettled                  // acknowledged; committable once every record before it is
	LogDropped                  // superseded by a rewind or a revoke: it is delivered again
	LogRewound                  // rewound by its owner
)

// LogEntry is what [Offsets] keeps in a record: a driver's record embeds it.
type LogEntry struct {
	State LogState
}

// Entry returns e: a pointer to a struct embedding a LogEntry, with a LogOffset method,
// is a [LogRecord].
func (e *LogEntry) Entry() *LogEntry { return e }

// InHand reports whether the record is handed out and still the consumer's to settle.
func (e *LogEntry) InHand() bool { return e.State == LogHanded || e.State == LogSettling }

// LogRecord is a pointer to a driver's record that embeds a [LogEntry] and knows its
// offset in its partition.
type LogRecord interface {
	comparable
	Entry() *LogEntry
	LogOffset() int64
}

// LogPartition is the bookkeeping of one partition a consumer is assigned: its records
// tracked in offset order (the first one unsettled), the mark its offset is committed
// up to, the rewind it waits for and its part of the uncommitted window. A driver's
// partition embeds one made with [NewLogPartition].
type LogPartition[R LogRecord] struct {
	pending FIFO[R]
	next    int64 // the lowest offset accepted next; -1 before the first record
	mark    R     // the last record settled in order: the commit goes past it
	sent    int64 // the offset last committed; -1 before the first commit
	seek    R     // the earliest record rewound and not yet sought back to
	// A failed settle write holds the partition back: a rewind before holdUntil seeks
	// only at seekAt, so a write that keeps failing never spins the handler.
	holdUntil, seekAt time.Time
	from, to          int64 // [from, to): offsets handed out and not committed; -1 before the first
	revoking          bool  // being revoked: its buffered records are not handed out (LogConsumer)
	held              bool  // its fetching is paused until its seek is due (LogConsumer.SeekPlan)
}

// NewLogPartition returns the bookkeeping of a partition assigned anew.
func NewLogPartition[R LogRecord]() LogPartition[R] {
	return LogPartition[R]{next: -1, sent: -1, from: -1, to: -1}
}

// Pending returns the records tracked, in offset order; valid until the next change.
func (p *LogPartition[R]) Pending() []R { return p.pending.Items() }

// First reports whether rec is the first record tracked: every record before it is settled.
func (p *LogPartition[R]) First(rec R) bool {
	return p.pending.Len() > 0 && *p.pending.Front() == rec
}

// Mark returns the record the partition's offset is committable past, when that is
// beyond the offset committed last.
func (p *LogPartition[R]) Mark() (R, bool) {
	var zero R
	if p.mark == zero || p.mark.LogOffset()+1 <= p.sent {
		return zero, false
	}
	return p.mark, true
}

// Seeking reports whether a rewind waits for its seek: records fetched meanwhile come
// again from the record rewound, and are not admitted.
func (p *LogPartition[R]) Seeking() bool {
	var zero R
	return p.seek != zero
}

// Seek returns the record the partition is to be sought back to (zero: none) and
// whether the seek is due at now (false while a hold lasts).
func (p *LogPartition[R]) Seek(now time.Time) (R, bool) {
	return p.seek, p.Seeking() && !p.seekAt.After(now)
}

// Sought records that the partition was sought back to rec; it reports whether that
// was the seek the partition waited for (a later rewind may have asked for another).
func (p *LogPartition[R]) Sought(rec R) bool {
	if p.seek != rec {
		return false
	}
	var zero R
	p.seek = zero
	return true
}

// Held reports whether the partition's fetching is paused until its seek is due
// ([LogConsumer.SeekPlan]).
func (p *LogPartition[R]) Held() bool { return p.held }

// Hold holds the partition back until until: a rewind before then seeks only then.
func (p *LogPartition[R]) Hold(until time.Time) {
	if until.After(p.holdUntil) {
		p.holdUntil = until
	}
}

// Offsets is the commit bookkeeping of a consumer of a partitioned log (Kafka): a
// partition's offset is committed once its record and every one before it are settled,
// a rewind seeks the partition back to the record and supersedes those after it, a
// partition revoked or lost drops what was not settled, and the records handed out and
// not committed (the uncommitted window) are bounded in number (MaxUncommitted) and,
// while commits fail, in time (MaxUncommittedTime). It touches no broker: the driver
// fetches, seeks and commits, and tells it. It is not safe for concurrent use: the
// driver holds its lock around every call.
type Offsets[R LogRecord] struct {
	MaxUncommitted     int
	MaxUncommittedTime time.Duration
	Logger             *slog.Logger // the lines about commits that stop the consumer
	Broker             string       // the lines' prefix
	// Passed, when set, is called for each record the commit mark passes (the driver
	// lets go of its body: only its offset is needed any more).
	Passed func(R)

	uncommitted int       // records handed out and not committed
	commitFrom  time.Time // the start of the oldest commit that has not succeeded
	failing     bool      // the last commit failed
	stalled     bool      // the window is full
	stallLogged bool
	writing     int           // records whose settle writes are in flight
	idle        chan struct{} // closed when writing drops to zero
}

// Uncommitted counts the records handed out and not committed.
func (o *Offsets[R]) Uncommitted() int { return o.uncommitted }

// Writing counts the records whose settle writes are in flight.
func (o *Offsets[R]) Writing() int { return o.writing }

// Idle returns a channel closed once no settle write is in flight; nil when none is.
func (o *Offsets[R]) Idle() <-chan struct{} {
	if o.writing == 0 {
		return nil
	}
	if o.idle == nil {
		o.idle = make(chan struct{})
	}
	return o.idle
}

// Set moves rec to state st, counting the records whose settle writes are in flight.
func (o *Offsets[R]) Set(rec R, st LogState) {
	e := rec.Entry()
	switch {
	case e.State == st:
		return
	case st == LogSettling:
		o.writing++
	case e.State == LogSettling:
		o.writing--
		if o.writing == 0 && o.idle != nil {
			close(o.idle)
			o.idle = nil
		}
	}
	e.State = st
}

// Admit starts tracking rec, fetched from p, in state st. A record below the offset p
// expects next was fetched already: it is marked dropped and Admit returns false.
func (o *Offsets[R]) Admit(p *LogPartition[R], rec R, st LogState) bool {
	e, off := rec.Entry(), rec.LogOffset()
	if p.next >= 0 && off < p.next {
		e.State = LogDropped
		return false
	}
	p.next = off + 1
	p.pending.Push(rec)
	e.State = st
	return true
}

// Hand marks rec, of p, handed out and counts it in the uncommitted window. It reports
// whether the window is half full: time to commit without waiting.
func (o *Offsets[R]) Hand(p *LogPartition[R], rec R) (urgent bool) {
	rec.Entry().State = LogHanded
	off := rec.LogOffset()
	if p.to < 0 {
		p.from, p.to = off, off
	}
	if end := off + 1; end > p.to {
		o.uncommitted += int(end - p.to)
		p.to = end
	}
	return 2*o.uncommitted >= o.MaxUncommitted
}

// Full reports whether the consumer is as far ahead of its commits as it may be, and
// must hand out nothing more for now; it logs when failing commits stop it, and when
// it goes on.
func (o *Offsets[R]) Full() bool {
	late := !o.commitFrom.IsZero() && time.Since(o.commitFrom) >= o.MaxUncommittedTime
	over := late || o.uncommitted >= o.MaxUncommitted
	o.stalled = over
	switch {
	case over && (late || o.failing):
		o.logStall()
	case !over && o.stallLogged:
		o.stallLogged = false
		o.Logger.Info(o.Broker+": commits caught up; the consumer takes records again", "uncommitted", o.uncommitted)
	}
	return over
}

// logStall says once that failing commits stopped the consumer.
func (o *Offsets[R]) logStall() {
	if o.stallLogged || !o.stalled {
		return
	}
	o.stallLogged = true
	o.Logger.Warn(o.Broker+": commits fail; the consumer stops taking records until one succeeds",
		"uncommitted", o.uncommitted, "max_uncommitted", o.MaxUncommitted,
		"commit_failing_for", time.Since(o.commitFrom), "max_uncommitted_time", o.MaxUncommittedTime)
}

// Ack marks rec, of p, settled and moves p's commit mark past every settled record at
// its head. It reports whether the mark moved.
func (o *Offsets[R]) Ack(p *LogPartition[R], rec R) bool {
	o.Set(rec, LogSettled)
	moved := false
	for p.pending.Len() > 0 && (*p.pending.Front()).Entry().State == LogSettled {
		h := p.pending.Pop()
		p.mark = h
		moved = true
		if o.Passed != nil {
			o.Passed(h)
		}
	}
	return moved
}

// Rewind marks rec rewound and every later record of p dropped, takes them out of the
// window and asks for p to be sought back to rec (the earliest rewind wins), at the end
// of p's hold. It reports whether later records were dropped, and how long the seek
// waits for the hold (zero: it is due now, or was waiting already). A record p no
// longer tracks is marked dropped, and ok is false.
func (o *Offsets[R]) Rewind(p *LogPartition[R], rec R, now time.Time) (dropped bool, wait time.Duration, ok bool) {
	pending := p.pending.Items()
	i := len(pending) - 1
	for i >= 0 && pending[i] != rec {
		i--
	}
	if i < 0 { // not tracked: the partition was revoked meanwhile
		o.Set(rec, LogDropped)
		return false, 0, false
	}
	for _, r := range pending[i+1:] {
		o.Set(r, LogDropped)
		dropped = true
	}
	o.Set(rec, LogRewound)
	p.pending.Truncate(i)
	at := rec.LogOffset()
	if p.to > at { // the records from at on come again
		lo := max(at, p.from)
		o.uncommitted -= int(p.to - lo)
		p.to = lo
	}
	if !p.Seeking() || at < p.seek.LogOffset() {
		p.seek = rec
	}
	if d := p.holdUntil.Sub(now); d > 0 && p.holdUntil.After(p.seekAt) {
		p.seekAt = p.holdUntil
		wait = d
	}
	p.next = at
	return dropped, wait, true
}

// Handed reports whether a record of p is handed out and not yet settled.
func (o *Offsets[R]) Handed(p *LogPartition[R]) bool {
	for _, r := range p.pending.Items() {
		if r.Entry().InHand() {
			return true
		}
	}
	return false
}

// Forget drops the bookkeeping of p, revoked or lost: its records not settled are
// marked dropped (the partition's next owner delivers them again) and its part of the
// window is let go. It returns how many records it dropped, and the seek left unmade
// (zero: none).
func (o *Offsets[R]) Forget(p *LogPartition[R]) (dropped int, seek R) {
	for _, r := range p.pending.Items() {
		if r.Entry().State != LogSettled {
			o.Set(r, LogDropped)
			dropped++
		}
	}
	if p.to >= 0 {
		o.uncommitted -= int(p.to - p.from)
	}
	return dropped, p.seek
}

// Committing notes the start of a commit: of some marks (some), or of none while every
// partition was looked at (all), when nothing is left to commit (its partitions were
// lost). It reports whether that ended a failing run: Receive may look again.
func (o *Offsets[R]) Committing(some, all bool) (wake bool) {
	switch {
	case some && o.commitFrom.IsZero():
		o.commitFrom = time.Now()
	case !some && all && !o.commitFrom.IsZero():
		o.commitFrom = time.Time{}
		return true
	}
	return false
}

// Committed records that p's offset off is committed: the window of p starts there.
func (o *Offsets[R]) Committed(p *LogPartition[R], off int64) {
	p.sent = max(p.sent, off)
	if p.to >= 0 && off > p.from {
		n := min(off, p.to) - p.from
		o.uncommitted -= int(n)
		p.from += n
	}
}

// CommitDone records the outcome of a commit; it reports whether it succeeded, so
// Receive may look again.
func (o *Offsets[R]) CommitDone(err error) (wake bool) {
	if o.failing = err != nil; o.failing {
		o.logStall()
		return false
	}
	o.commitFrom = time.Time{}
	return true
}
