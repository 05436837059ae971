package faultsuite

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
)

// Ledger is the account of one run, kept by meta.id: what was published and whether
// it fails, how often each good message was handled, how often each failing one was
// found in the dead-letter queue, every settlement the workers reported and what each
// worker held unsettled. Its methods are safe for concurrent use.
type Ledger struct {
	queue string

	mu       sync.Mutex
	msgs     map[string]*record
	order    []string
	inflight map[int]map[string]int  // worker -> id -> deliveries received and not settled
	finished map[int]map[string]bool // worker -> ids whose handler returned in it
	settles  []settlement            // the settlements that held, in arrival order
	unknown  map[string]int          // ids seen that were never published
	problems map[string]int          // things that must not happen, with how often
	retries  int                     // publishes retried
	failed   map[string]int          // settlements that failed, by action
	recvErrs int                     // receives that failed
	failures []failure               // the failed receives and settlements, in arrival order
	deadTry  map[string][]deadTry    // id -> its dead-letter settlements, whether they held or not
}

type deadTry struct {
	began, at time.Time
	held      bool
}

type record struct {
	n         int
	failing   bool
	handled   int
	dead      int       // copies read from the dead-letter queue with reason "failed"
	deadAt    time.Time // first dead-letter write a worker reported as confirmed
	destroyed bool      // confirmed in the dead-letter queue before a fault destroyed it
}

// failure is a receive or a settlement a worker reported as failed.
type failure struct {
	at     time.Time
	worker int
	what   string
}

type settlement struct {
	at     time.Time
	worker int
	id     string
	action string
}

// NewLedger returns the ledger of a run on queue.
func NewLedger(queue string) *Ledger {
	return &Ledger{
		queue: queue, msgs: map[string]*record{}, inflight: map[int]map[string]int{},
		unknown: map[string]int{}, problems: map[string]int{}, failed: map[string]int{},
		deadTry: map[string][]deadTry{}, finished: map[int]map[string]bool{},
	}
}

// Published records message n of the stream, with meta.id id, failing or not. Record
// it before the publish, so a worker's report of it can never come first.
func (l *Ledger) Published(id string, n int, failing bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.msgs[id]; dup {
		l.problems[fmt.Sprintf("meta.id %s published twice", id)]++
		return
	}
	l.msgs[id] = &record{n: n, failing: failing}
	l.order = append(l.order, id)
}

// Retried records a publish that failed and was made again with the same bytes.
func (l *Ledger) Retried() {
	l.mu.Lock()
	l.retries++
	l.mu.Unlock()
}

// Problem records something that must not happen.
func (l *Ledger) Problem(format string, args ...any) {
	l.mu.Lock()
	l.problems[fmt.Sprintf(format, args...)]++
	l.mu.Unlock()
}

// Apply records an event a worker reported.
func (l *Ledger) Apply(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.Ev {
	case EvReceived:
		if ev.ID == "" {
			return // poison: no id (counted by the settlement's kind)
		}
		m := l.inflight[ev.Worker]
		if m == nil {
			m = map[string]int{}
			l.inflight[ev.Worker] = m
		}
		m[ev.ID]++
	case EvSettled:
		if m := l.inflight[ev.Worker]; m[ev.ID] > 0 {
			if m[ev.ID]--; m[ev.ID] == 0 {
				delete(m, ev.ID)
			}
		}
		if ev.Kind == string(babelqueue.KindPoison) || ev.Kind == string(babelqueue.KindUnknownURN) {
			l.problems[fmt.Sprintf("a delivery settled as %s (%s)", ev.Kind, ev.Action)]++
		}
		if ev.Action == string(babelqueue.ActionDeadLetter) {
			l.deadTry[ev.ID] = append(l.deadTry[ev.ID], deadTry{began: ev.Time().Add(-time.Duration(ev.Took)), at: ev.Time(), held: ev.Err == ""})
		}
		if ev.Err != "" {
			l.failed[ev.Action]++
			l.failures = append(l.failures, failure{at: ev.Time(), worker: ev.Worker, what: "a failed " + ev.Action + " settlement: " + ev.Err})
			return
		}
		l.settles = append(l.settles, settlement{at: ev.Time(), worker: ev.Worker, id: ev.ID, action: ev.Action})
		if r := l.msgs[ev.ID]; r != nil && ev.Action == string(babelqueue.ActionDeadLetter) && r.deadAt.IsZero() {
			r.deadAt = ev.Time()
		}
	case EvRecvErr:
		l.recvErrs++
		l.failures = append(l.failures, failure{at: ev.Time(), worker: ev.Worker, what: "a failed receive: " + ev.Err})
	case EvHandled:
		l.finish(ev)
		r := l.msgs[ev.ID]
		switch {
		case r == nil:
			l.unknown[ev.ID]++
		case r.failing:
			l.problems[fmt.Sprintf("failing message %d was handled", r.n)]++
		default:
			r.handled++
		}
	case EvTried:
		l.finish(ev)
		r := l.msgs[ev.ID]
		switch {
		case r == nil:
			l.unknown[ev.ID]++
		case !r.failing:
			l.problems[fmt.Sprintf("good message %d failed", r.n)]++
		}
	}
}

// DeadLetter records a body read from the dead-letter queue: it must be a message of
// the run that fails, dead-lettered with reason "failed" from the run's queue, with the
// handler's error.
func (l *Ledger) DeadLetter(body []byte) {
	env, err := envelope.Decode(body)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems[fmt.Sprintf("a dead letter is not an envelope: %v", err)]++
		return
	}
	r := l.msgs[env.Meta.ID]
	switch {
	case r == nil:
		l.unknown[env.Meta.ID]++
	case !r.failing:
		l.problems[fmt.Sprintf("good message %d was dead-lettered", r.n)]++
	case env.DeadLetter == nil:
		l.problems[fmt.Sprintf("failing message %d is in the dead-letter queue without a dead_letter block", r.n)]++
	case env.DeadLetter.Reason != babelqueue.ReasonFailed || env.DeadLetter.OriginalQueue != l.queue ||
		deref(env.DeadLetter.Error) != fmt.Sprintf("refused %d", r.n):
		l.problems[fmt.Sprintf("failing message %d dead-lettered with reason %q from %q, error %q", r.n,
			env.DeadLetter.Reason, env.DeadLetter.OriginalQueue, deref(env.DeadLetter.Error))]++
	default:
		r.dead++
	}
}

// Complete reports whether every good message was handled and every failing one read
// from the dead-letter queue (or destroyed there by the fault).
func (l *Ledger) Complete() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.msgs {
		if r.failing && r.dead == 0 && !r.destroyed || !r.failing && r.handled == 0 {
			return false
		}
	}
	return true
}

// DeadLettersRead reports whether every failing message whose dead-letter write a
// worker reported as confirmed was read from the dead-letter queue.
func (l *Ledger) DeadLettersRead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.msgs {
		if r.failing && !r.deadAt.IsZero() && r.dead == 0 {
			return false
		}
	}
	return true
}

// Destroyed marks the failing messages whose dead-letter write was confirmed before
// at and that were not read from the dead-letter queue: a fault that deletes the
// dead-letter queue (at is when it was deleted) destroyed them, the runtime did not
// lose them. It returns how many.
func (l *Ledger) Destroyed(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.msgs {
		if r.failing && r.dead == 0 && !r.deadAt.IsZero() && r.deadAt.Before(at) {
			r.destroyed = true
			n++
		}
	}
	return n
}

// InFlight returns the ids worker received and did not settle.
func (l *Ledger) InFlight(worker int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id := range l.inflight[worker] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// FirstSettleAfter returns the time of worker's first settlement that held after t.
func (l *Ledger) FirstSettleAfter(worker int, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, s := range l.settles {
		if s.worker == worker && s.at.After(t) && (first.IsZero() || s.at.Before(first)) {
			first = s.at
		}
	}
	return first, !first.IsZero()
}

// FirstFailureAfter returns the time of worker's first failed receive or settlement
// after t, and what it was.
func (l *Ledger) FirstFailureAfter(worker int, t time.Time) (at time.Time, what string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.failures {
		if f.worker == worker && f.at.After(t) && (at.IsZero() || f.at.Before(at)) {
			at, what = f.at, f.what
		}
	}
	return at, what, !at.IsZero()
}

// FirstFinalAfter returns the time of the first settlement with action that held
// after t and was the last such settlement of its message: a dead-letter write after
// which the message was not dead-lettered again (a settle write that a transport
// confirms after Settle returned, and that failed, brings the message back).
func (l *Ledger) FirstFinalAfter(action babelqueue.Action, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[string]time.Time{}
	for _, s := range l.settles {
		if s.action == string(action) && s.at.After(last[s.id]) {
			last[s.id] = s.at
		}
	}
	var first time.Time
	for _, at := range last {
		if at.After(t) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// Refused reports how the messages whose dead-letter write was refused, begun before t
// (it failed, or was made again later), came through: when the last of them was
// dead-lettered for good (after t), and how many never were. n is how many there were.
func (l *Ledger) Refused(t time.Time) (last time.Time, n, never int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tries := range l.deadTry {
		first, final := tries[0], tries[len(tries)-1]
		refused := len(tries) > 1 || !first.held
		if !refused || !first.began.Before(t) {
			continue
		}
		n++
		switch {
		case !final.held:
			never++
		case final.at.After(last):
			last = final.at
		}
	}
	return last, n, never
}

// LongestPause returns the longest time within [from, to] in which no worker made a
// settlement that held: what a fault that stopped the consumers left.
func (l *Ledger) LongestPause(from, to time.Time) time.Duration {
	l.mu.Lock()
	var at []time.Time
	for _, s := range l.settles {
		if !s.at.Before(from) && !s.at.After(to) {
			at = append(at, s.at)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	longest, prev := time.Duration(0), from
	for _, t := range append(at, to) {
		longest = max(longest, t.Sub(prev))
		prev = t
	}
	return longest
}

// TakenBack returns when the last of ids, the deliveries victim held when it was
// killed at t, was settled by another worker after t, and the ids nobody settled:
// neither another worker after t nor victim itself (a settlement whose event was
// still in the pipe at the kill).
func (l *Ledger) TakenBack(victim int, ids []string, t time.Time) (last time.Time, unsettled []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		var first time.Time
		byVictim := false
		for _, s := range l.settles {
			if s.id == id && s.worker == victim {
				byVictim = true
			}
			if s.id == id && s.worker != victim && s.at.After(t) && (first.IsZero() || s.at.Before(first)) {
				first = s.at
			}
		}
		switch {
		case !first.IsZero():
			if first.After(last) {
				last = first
			}
		case !byVictim:
			unsettled = append(unsettled, id)
		}
	}
	return last, unsettled
}

// Finished reports whether every one of ids was handled to the end in worker: its
// handler returned (with the message's result or its error), so the runtime was
// settling it, or had settled it, when the worker died.
func (l *Ledger) Finished(worker int, ids []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if !l.finished[worker][id] {
			return false
		}
	}
	return true
}

func (l *Ledger) finish(ev Event) {
	m := l.finished[ev.Worker]
	if m == nil {
		m = map[string]bool{}
		l.finished[ev.Worker] = m
	}
	m[ev.ID] = true
}

// Counts is the ledger's account of the messages of a run.
type Counts struct {
	Published    int // messages published (distinct meta.ids)
	Failing      int // of which fail on purpose
	Handled      int // distinct good messages handled
	DeadLettered int // distinct failing messages read from the dead-letter queue
	Destroyed    int // failing messages confirmed in the dead-letter queue, then deleted by the fault
	Missing      int // good messages never handled, failing ones never dead-lettered
	Duplicates   int // handlings of a good message past its first, dead letters past the first
	Retries      int // publishes retried
	Unknown      int // ids seen that were never published
	// FailedSettles are the settlements that failed (and were rewound), by action;
	// ReceiveErrors the receives that failed: what the workers saw of a fault.
	FailedSettles map[string]int
	ReceiveErrors int
	// DeadLetteredAgain are the messages dead-lettered more than once: a dead-letter
	// write that failed after Settle returned (a pipelined one) brought them back.
	DeadLetteredAgain int
}

// Counts returns the account so far.
func (l *Ledger) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Counts{Published: len(l.msgs), Retries: l.retries, Unknown: len(l.unknown), FailedSettles: maps.Clone(l.failed), ReceiveErrors: l.recvErrs}
	for _, tries := range l.deadTry {
		if len(tries) > 1 {
			c.DeadLetteredAgain++
		}
	}
	for _, r := range l.msgs {
		switch {
		case r.failing:
			c.Failing++
			switch {
			case r.dead > 0:
				c.DeadLettered++
				c.Duplicates += r.dead - 1
			case r.destroyed:
				c.Destroyed++
			default:
				c.Missing++
			}
		case r.handled > 0:
			c.Handled++
			c.Duplicates += r.handled - 1
		default:
			c.Missing++
		}
	}
	return c
}

// MissingNumbers returns the stream numbers of the messages missing so far, at most
// max of them.
func (l *Ledger) MissingNumbers(max int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ns []int
	for _, id := range l.order {
		r := l.msgs[id]
		if r.failing && r.dead == 0 && !r.destroyed || !r.failing && r.handled == 0 {
			ns = append(ns, r.n)
		}
	}
	slices.Sort(ns)
	if len(ns) > max {
		ns = ns[:max]
	}
	return ns
}

// Problems returns what must not have happened, each with how often it did.
func (l *Ledger) Problems() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for p, n := range l.problems {
		if n > 1 {
			p = fmt.Sprintf("%s (%d times)", p, n)
		}
		out = append(out, p)
	}
	if len(l.unknown) > 0 {
		out = append(out, fmt.Sprintf("%d meta.ids seen that the run never published", len(l.unknown)))
	}
	slices.Sort(out)
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
