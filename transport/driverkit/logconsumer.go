package driverkit

import (
	"context"
	"sync"
	"time"
)

// LogPart is a driver's partition of a partitioned log: a pointer to a struct that
// embeds a [LogPartition] made with [NewLogPartition].
type LogPart[R LogRecord] interface {
	comparable
	Log() *LogPartition[R]
}

// Log returns p: a pointer to a struct embedding a LogPartition is a [LogPart].
func (p *LogPartition[R]) Log() *LogPartition[R] { return p }

// LogConsumer is the bookkeeping of a consumer of a partitioned log (Kafka) around its
// [Offsets]: the partitions it is assigned, by key K (a topic and a partition), the
// Receive calls waiting for a record, the rewinds waiting for their seek, and the
// partitions revoked or lost. It touches no broker: the driver polls, seeks, commits
// and pauses fetching, and tells it. Like Offsets it is not safe for concurrent use:
// the driver holds its lock around every call, and passes it to the methods that wait.
// Set Offsets, Parts, PartOf and TakeBack before use.
type LogConsumer[R LogRecord, K comparable, P LogPart[R]] struct {
	// Offsets is the commit bookkeeping and the uncommitted window.
	Offsets Offsets[R]
	// Parts are the partitions assigned, by key.
	Parts map[K]P
	// PartOf returns the partition a record was admitted to.
	PartOf func(R) P
	// TakeBack is called when records handed out were dropped (by a rewind or a
	// revoke), for the driver to tell its [Consumer.TakeBack].
	TakeBack func()

	seekWanted bool          // a rewind may wait for its seek
	wake       chan struct{} // closed by Wake when a Receive waits on it
}

// Next hands out the next record pop gives (false: none left) that is still buffered
// and not of a partition being revoked, counting it in the uncommitted window. It
// reports whether there was one, and whether the window is half full: time to commit
// without waiting. It hands out nothing while the window is full ([Offsets.Full]).
func (c *LogConsumer[R, K, P]) Next(pop func() (R, bool)) (rec R, urgent, ok bool) {
	if c.Offsets.Full() {
		return rec, false, false
	}
	for {
		if rec, ok = pop(); !ok {
			return rec, false, false
		}
		p := c.PartOf(rec).Log()
		if rec.Entry().State != LogBuffered || p.revoking {
			continue
		}
		return rec, c.Offsets.Hand(p, rec), true
	}
}

// Wait returns a channel closed at the next [LogConsumer.Wake]: a Receive that found
// nothing to hand out waits on it without the lock.
func (c *LogConsumer[R, K, P]) Wait() <-chan struct{} {
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	return c.wake
}

// Wake lets every waiting Receive look again.
func (c *LogConsumer[R, K, P]) Wake() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// Owns reports whether p is still the partition assigned under key k: a record of a
// partition revoked meanwhile (and maybe assigned again) is not settled through it.
func (c *LogConsumer[R, K, P]) Owns(k K, p P) bool { return c.Parts[k] == p }

// Ack marks rec settled and moves its partition's commit mark past every settled record
// at its head. It reports whether the mark moved: there is something to commit.
func (c *LogConsumer[R, K, P]) Ack(rec R) bool {
	return c.Offsets.Ack(c.PartOf(rec).Log(), rec)
}

// Rewind drops rec and every later record of its partition ([Offsets.Rewind]), calling
// TakeBack when records handed out were dropped, and marks that a seek is wanted. It
// returns how long the seek waits for the partition's hold, and false when the
// partition no longer tracks rec (it was revoked): nothing is to be sought.
func (c *LogConsumer[R, K, P]) Rewind(rec R, now time.Time) (wait time.Duration, ok bool) {
	dropped, wait, ok := c.Offsets.Rewind(c.PartOf(rec).Log(), rec, now)
	if !ok {
		return 0, false
	}
	if dropped {
		c.TakeBack()
	}
	c.seekWanted = true
	return wait, true
}

// SeekWanted reports whether a rewind may wait for its seek.
func (c *LogConsumer[R, K, P]) SeekWanted() bool { return c.seekWanted }

// SeekPlan reports whether a rewind's seek is due at now. It marks held the partitions
// whose seek waits for the end of their hold ([LogPartition.Hold]) and returns those
// not held before, for the driver to pause their fetching until the seek.
func (c *LogConsumer[R, K, P]) SeekPlan(now time.Time) (due bool, hold []K) {
	if !c.seekWanted {
		return false, nil
	}
	for k, p := range c.Parts {
		lp := p.Log()
		switch _, ok := lp.Seek(now); {
		case !lp.Seeking():
		case ok:
			due = true
		case !lp.held:
			lp.held = true
			hold = append(hold, k)
		}
	}
	return due, hold
}

// DueSeeks returns the partitions whose seek is due at now, each with the record to
// seek back to, and those of them that are held, for the driver to resume once it has
// made the seeks. It then calls [LogConsumer.Sought].
func (c *LogConsumer[R, K, P]) DueSeeks(now time.Time) (seeks map[K]R, held []K) {
	if !c.seekWanted {
		return nil, nil
	}
	for k, p := range c.Parts {
		if at, ok := p.Log().Seek(now); ok {
			if seeks == nil {
				seeks = map[K]R{}
			}
			seeks[k] = at
			if p.Log().held {
				held = append(held, k)
			}
		}
	}
	return seeks, held
}

// Sought records that the partitions were sought back to the records of seeks: a
// partition still assigned that waited for that seek is no longer held, and a seek is
// still wanted only while a partition waits for one.
func (c *LogConsumer[R, K, P]) Sought(seeks map[K]R) {
	for k, at := range seeks {
		if p, ok := c.Parts[k]; ok && p == c.PartOf(at) && p.Log().Sought(at) {
			p.Log().held = false
		}
	}
	c.seekWanted = false
	for _, p := range c.Parts {
		c.seekWanted = c.seekWanted || p.Log().Seeking()
	}
}

// Marks starts a commit of the partitions in only (every one when only is nil): it
// calls each with the key of every partition whose offset moved since the last commit
// and the record the commit goes past, and returns how many it found. A commit of none
// while commits failed ends the failing run ([Offsets.Committing]) and wakes Receive.
func (c *LogConsumer[R, K, P]) Marks(only map[K]bool, each func(k K, past R)) int {
	n := 0
	for k, p := range c.Parts {
		if only != nil && !only[k] {
			continue
		}
		if m, ok := p.Log().Mark(); ok {
			each(k, m)
			n++
		}
	}
	if c.Offsets.Committing(n > 0, only == nil) {
		c.Wake()
	}
	return n
}

// Committed records that partition k's offset off is committed, when k is still
// assigned.
func (c *LogConsumer[R, K, P]) Committed(k K, off int64) {
	if p, ok := c.Parts[k]; ok {
		c.Offsets.Committed(p.Log(), off)
	}
}

// CommitDone records the outcome of a commit ([Offsets.CommitDone]), waking Receive
// when it succeeded.
func (c *LogConsumer[R, K, P]) CommitDone(err error) {
	if c.Offsets.CommitDone(err) {
		c.Wake()
	}
}

// AwaitHanded stops handing out the buffered records of the partitions keys (they are
// being revoked) and waits, at most grace and not once done is closed, until none of
// their records is handed out and unsettled. mu is the driver's lock: AwaitHanded takes
// it, and lets go of it while it waits.
func (c *LogConsumer[R, K, P]) AwaitHanded(mu sync.Locker, keys map[K]bool, grace time.Duration, done <-chan struct{}) {
	deadline := time.Now().Add(grace)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		if p, ok := c.Parts[k]; ok {
			p.Log().revoking = true
		}
	}
	for !closed(done) && c.handed(keys) && time.Now().Before(deadline) {
		mu.Unlock()
		select {
		case <-tick.C:
		case <-done:
		}
		mu.Lock()
	}
}

// closed reports whether done is closed.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// handed reports whether a record of the partitions keys is handed out and not yet
// settled.
func (c *LogConsumer[R, K, P]) handed(keys map[K]bool) bool {
	for k := range keys {
		if p, ok := c.Parts[k]; ok && c.Offsets.Handed(p.Log()) {
			return true
		}
	}
	return false
}

// Forget drops the partitions keys, revoked or lost ([Offsets.Forget]): their records
// not settled are delivered again by whoever owns the partition next, and TakeBack is
// called when there were any. It calls each for every partition it drops, with the
// record of a seek left unmade (zero: none), and returns how many records it dropped.
func (c *LogConsumer[R, K, P]) Forget(keys map[K]bool, each func(k K, p P, seek R)) int {
	dropped := 0
	for k := range keys {
		p, ok := c.Parts[k]
		if !ok {
			continue
		}
		n, seek := c.Offsets.Forget(p.Log())
		dropped += n
		each(k, p, seek)
		delete(c.Parts, k)
	}
	if dropped > 0 {
		c.TakeBack()
	}
	return dropped
}

// WaitIdle waits, until ctx ends, for the settle writes in flight ([Offsets.Idle]). mu
// is the driver's lock: WaitIdle takes it, and lets go of it while it waits.
func (c *LogConsumer[R, K, P]) WaitIdle(ctx context.Context, mu sync.Locker) error {
	mu.Lock()
	defer mu.Unlock()
	for idle := c.Offsets.Idle(); idle != nil; idle = c.Offsets.Idle() {
		mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			mu.Lock()
			return ctx.Err()
		}
		mu.Lock()
	}
	return nil
}

// Slabs is a FIFO of records held in slabs (slices of record structs) rather than a
// pointer per record: a driver's list of fetched records waiting to be handed out,
// pushed a slab at a time and popped one record at a time. The zero value is empty. It
// is not safe for concurrent use.
type Slabs[T any] struct {
	s FIFO[slab[T]]
	n int // records not yet popped
}

// slab is the part of a pushed slab not yet popped.
type slab[T any] struct {
	recs []T
	i    int // recs[i:] are still queued
}

// Len counts the records not yet popped.
func (q *Slabs[T]) Len() int { return q.n }

// Push appends a slab of records; an empty one is ignored.
func (q *Slabs[T]) Push(recs []T) {
	if len(recs) == 0 {
		return
	}
	q.s.Push(slab[T]{recs: recs})
	q.n += len(recs)
}

// Pop removes and returns the oldest record, false when none is left.
func (q *Slabs[T]) Pop() (*T, bool) {
	if q.n == 0 {
		return nil, false
	}
	sp := q.s.Front()
	r := &sp.recs[sp.i]
	sp.i++
	q.n--
	if sp.i == len(sp.recs) {
		q.s.Pop()
	}
	return r, true
}
