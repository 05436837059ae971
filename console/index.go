package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// The dimensions a dead-letter queue is grouped by.
const (
	dimReason = iota
	dimURN
	dimLang
	dimQueue
	dimFingerprint
	numDims
)

// dimParams are the query parameters that filter on each dimension.
var dimParams = [numDims]string{"reason", "urn", "lang", "queue", "fp"}

// dimTitles name the dimensions on the page.
var dimTitles = [numDims]string{"Reason", "URN", "Producing language", "Original queue", "Error fingerprint"}

// row is what the index keeps of one dead letter: no body, only what the page
// groups, filters, lists and searches on. Rows are immutable and shared between
// successive indexes of a queue (a message read again is not decoded again).
type row struct {
	key      refKey
	ref      string
	id       string
	trace    string
	vals     [numDims]string
	errText  string
	failedAt int64 // Unix ms; 0 when unknown
	poison   bool
	size     int
}

// entry is a row at its place in the queue: the cursor of the browse page it was
// read from and its position in that page.
type entry struct {
	*row
	page transport.Cursor
	pos  int32
}

// group counts the rows that share one value of a dimension.
type group struct {
	Key     string `json:"key"`
	Count   int    `json:"count"`
	Oldest  int64  `json:"oldest,omitempty"`
	Newest  int64  `json:"newest,omitempty"`
	Example string `json:"example,omitempty"`
}

// snapshot is one complete read of a queue.
type snapshot struct {
	version   int64
	entries   []entry
	byRef     map[refKey]*row
	groups    [numDims][]group
	poison    int
	built     time.Time
	took      time.Duration
	truncated bool
	// started is when the read began, count the broker's last count of the queue
	// then (counted: there was one).
	started time.Time
	count   sample
	counted bool

	viewMu sync.Mutex
	views  map[filter]*filtered
}

// maxErrText bounds the error text a row keeps.
const maxErrText = 500

// index is the console's read of one queue, rebuilt in the background: a page of a
// dead-letter queue answers from the last complete read, grouped and paged on the
// server, however long the queue.
type index struct {
	c     *Console
	b     *brokerState
	queue string

	read atomic.Int64 // messages read by the build under way

	mu       sync.Mutex
	snap     *snapshot
	building bool
	again    bool
	started  int64 // builds started
	finished int64 // builds finished (ok or not)
	changed  chan struct{}
	err      error
	errAt    time.Time
	viewed   time.Time
}

func (c *Console) indexOf(b *brokerState, queue string) *index {
	b.mu.Lock()
	defer b.mu.Unlock()
	ix := b.indexes[queue]
	if ix == nil {
		ix = &index{c: c, b: b, queue: queue, changed: make(chan struct{})}
		b.indexes[queue] = ix
	}
	return ix
}

// refresh starts a build unless one runs, in which case another follows it. It
// returns the sequence number of a build that starts after this call.
func (ix *index) refresh() int64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.building {
		ix.again = true
		return ix.started + 1
	}
	ix.startLocked()
	return ix.started
}

func (ix *index) startLocked() {
	seq := ix.started + 1
	if !ix.c.background(func() { ix.run(seq) }) {
		return
	}
	ix.started = seq
	ix.building = true
}

func (ix *index) run(seq int64) {
	snap, err := ix.build(ix.c.ctx)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err == nil {
		snap.version = seq
		ix.snap, ix.err = snap, nil
	} else {
		ix.err, ix.errAt = err, time.Now()
		if ix.c.ctx.Err() == nil {
			ix.c.o.log.Warn("console: reading a queue failed", "broker", ix.b.name, "queue", ix.queue, "err", err)
		}
	}
	ix.finished = seq
	ix.building = false
	close(ix.changed)
	ix.changed = make(chan struct{})
	if ix.again {
		ix.again = false
		ix.startLocked()
	}
}

// waitFor waits until the build numbered seq (or a later one) has finished.
func (ix *index) waitFor(ctx context.Context, seq int64) error {
	for {
		ix.mu.Lock()
		done, ch := ix.finished >= seq, ix.changed
		ix.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// state is what a page says of the index.
type indexState struct {
	snap     *snapshot
	building bool
	read     int64
	err      error
	errAt    time.Time
}

// current returns the last complete read and starts a new one when there is none or
// it is older than the staleness bound.
func (ix *index) current() indexState {
	ix.mu.Lock()
	ix.viewed = time.Now()
	if ix.stale() && !ix.building && (ix.err == nil || time.Since(ix.errAt) > time.Second) {
		ix.startLocked()
	}
	st := indexState{snap: ix.snap, building: ix.building, read: ix.read.Load(), err: ix.err, errAt: ix.errAt}
	ix.mu.Unlock()
	return st
}

// maxAge is how old an index may grow while the broker's count of the queue says
// it did not change (a count can stay the same while messages come and go).
const maxAge = 2 * time.Minute

// stale reports whether the index should be read again: there is none, or it is
// older than the staleness bound and the queue changed since (by the broker's count;
// always, where the broker cannot count), or it is older than maxAge. ix.mu is held.
func (ix *index) stale() bool {
	if ix.snap == nil {
		return true
	}
	age := time.Since(ix.snap.built)
	if age <= ix.c.o.stale {
		return false
	}
	now, ok := ix.b.lastSample(ix.queue)
	return age > maxAge || !ok || !ix.snap.counted || now.at.Before(ix.snap.started) ||
		now.Ready != ix.snap.count.Ready || now.Appended != ix.snap.count.Appended
}

// ready returns a complete read, waiting for the first one (up to ctx).
func (ix *index) ready(ctx context.Context) (indexState, error) {
	st := ix.current()
	if st.snap != nil {
		return st, nil
	}
	ix.mu.Lock()
	seq := ix.started
	ix.mu.Unlock()
	if err := ix.waitFor(ctx, seq); err != nil {
		return st, err
	}
	st = ix.current()
	if st.snap == nil && st.err != nil {
		return st, st.err
	}
	return st, nil
}

type pageRead struct {
	at  transport.Cursor
	ds  []*transport.Delivery
	out []entry
}

type chunk struct {
	p      *pageRead
	lo, hi int
}

// build reads the whole queue (up to the bound) with browse pages, decodes the
// messages on every core while the next page is fetched, and groups them.
func (ix *index) build(ctx context.Context) (*snapshot, error) {
	start := time.Now()
	// The broker's count as the read begins: the page reads the queue again once
	// the count moves.
	count, counted := sample{}, false
	if st, err := transport.Stats(ctx, ix.b.tr, ix.queue); err == nil {
		count, counted = sample{at: start, QueueStats: st}, true
	}
	ix.read.Store(0)
	ix.mu.Lock()
	var prev map[refKey]*row
	if ix.snap != nil {
		prev = ix.snap.byRef
	}
	ix.mu.Unlock()

	workers := max(runtime.GOMAXPROCS(0), 1)
	jobs := make(chan chunk, workers*4)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fps := map[string]string{} // this worker's fingerprints by error text
			for ch := range jobs {
				for i := ch.lo; i < ch.hi; i++ {
					ch.p.out[i] = entry{row: readRow(ch.p.ds[i], prev, fps), page: ch.p.at, pos: int32(i)}
					ch.p.ds[i] = nil // let the body go
				}
				ix.read.Add(int64(ch.hi - ch.lo))
			}
		}()
	}
	var pages []*pageRead
	truncated, err := ix.fetch(ctx, func(p *pageRead) {
		pages = append(pages, p)
		for lo := 0; lo < len(p.ds); lo += 256 {
			jobs <- chunk{p: p, lo: lo, hi: min(lo+256, len(p.ds))}
		}
	})
	close(jobs)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	n := 0
	for _, p := range pages {
		n += len(p.out)
	}
	s := &snapshot{entries: make([]entry, 0, n), byRef: make(map[refKey]*row, n), truncated: truncated,
		started: start, count: count, counted: counted}
	for _, p := range pages {
		s.entries = append(s.entries, p.out...)
	}
	var t tally
	for _, e := range s.entries {
		s.byRef[e.key] = e.row
		t.add(e.row)
	}
	s.groups = t.groups()
	s.poison = t.poison
	s.built = time.Now()
	s.took = s.built.Sub(start)
	return s, nil
}

// fetch browses the queue page by page and hands each page to fn. It reports
// whether it stopped at the bound with more to read.
func (ix *index) fetch(ctx context.Context, fn func(*pageRead)) (truncated bool, err error) {
	limit := ix.c.o.maxIndexed
	size := ix.b.scanPage(limit)
	var from transport.Cursor
	n := 0
	for n < limit {
		p, err := transport.Browse(ctx, ix.b.tr, ix.queue, from, min(size, limit-n))
		if err != nil {
			return false, fmt.Errorf("browse %q: %w", ix.queue, err)
		}
		if len(p.Deliveries) > 0 {
			fn(&pageRead{at: from, ds: p.Deliveries, out: make([]entry, len(p.Deliveries))})
		}
		n += len(p.Deliveries)
		if p.End || len(p.Deliveries) == 0 && p.Next == from {
			return false, nil
		}
		from = p.Next
	}
	return true, nil
}

// refKey identifies a message by its body and key: SHA-256 of the body, or, for a
// message with a key, SHA-256 of that digest, a marker and the key; cut to 12 bytes.
// It is what a redrive selects a message by.
type refKey [12]byte

func keyOf(d *transport.Delivery) refKey {
	sum := sha256.Sum256(d.Body)
	if d.Key != nil {
		buf := make([]byte, 0, len(sum)+1+len(d.Key))
		buf = append(append(append(buf, sum[:]...), 1), d.Key...)
		sum = sha256.Sum256(buf)
	}
	return refKey(sum[:12])
}

func (k refKey) String() string { return hex.EncodeToString(k[:]) }

// ref is the message's refKey as text, as pages and requests carry it.
func ref(d *transport.Delivery) string { return keyOf(d).String() }

// readRow summarises one delivery, or returns the row of an earlier read of the
// same message.
func readRow(d *transport.Delivery, prev map[refKey]*row, fps map[string]string) *row {
	k := keyOf(d)
	if r, ok := prev[k]; ok {
		return r
	}
	var r *row
	if env, err := envelope.Decode(d.Body); err == nil {
		// An envelope: dlq.Read would decode it the same way, and also cut the
		// original bytes out of the body, which the index does not keep.
		r = &row{id: env.Meta.ID, trace: env.TraceID, poison: env.Accepts() != nil}
		r.vals[dimURN], r.vals[dimLang] = env.Job, env.Meta.Lang
		if dl := env.DeadLetter; dl != nil {
			r.vals[dimReason], r.vals[dimQueue] = dl.Reason, dl.OriginalQueue
			r.poison = r.poison || dl.Reason == envelope.ReasonPoison
			if dl.Error != nil {
				r.errText = *dl.Error
			}
			if dl.FailedAt > 0 {
				r.failedAt = dl.FailedAt
			}
		}
	} else {
		e := dlq.Read(d) // poison: dlq reads what block it carries, leniently
		r = &row{id: e.ID(), trace: e.TraceID(), poison: e.Poison, errText: e.Error()}
		r.vals = [numDims]string{e.Reason(), e.URN(), e.Lang(), e.OriginalQueue(), ""}
		if at := e.FailedAt(); !at.IsZero() {
			r.failedAt = at.UnixMilli()
		}
	}
	fp, ok := fps[r.errText]
	if !ok {
		fp = dlq.Fingerprint(r.errText)
		if len(fps) < 10_000 {
			fps[r.errText] = fp
		}
	}
	r.vals[dimFingerprint] = fp
	r.key, r.ref, r.size = k, k.String(), len(d.Body)
	r.errText = clip(r.errText, maxErrText)
	return r
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// tally counts rows by every dimension.
type tally struct {
	total, poison int
	by            [numDims]map[string]*group
}

func (t *tally) add(r *row) {
	t.total++
	if r.poison {
		t.poison++
	}
	for d := range numDims {
		if t.by[d] == nil {
			t.by[d] = map[string]*group{}
		}
		g := t.by[d][r.vals[d]]
		if g == nil {
			g = &group{Key: r.vals[d]}
			if d == dimFingerprint {
				g.Example = r.errText
			}
			t.by[d][r.vals[d]] = g
		}
		g.Count++
		if r.failedAt != 0 {
			if g.Oldest == 0 || r.failedAt < g.Oldest {
				g.Oldest = r.failedAt
			}
			g.Newest = max(g.Newest, r.failedAt)
		}
	}
}

// groups returns the groups of every dimension, largest first.
func (t *tally) groups() [numDims][]group {
	var out [numDims][]group
	for d := range numDims {
		out[d] = make([]group, 0, len(t.by[d]))
		for _, g := range t.by[d] {
			out[d] = append(out[d], *g)
		}
		sort.Slice(out[d], func(i, j int) bool {
			a, b := out[d][i], out[d][j]
			if a.Count != b.Count {
				return a.Count > b.Count
			}
			return a.Key < b.Key
		})
	}
	return out
}

// filter selects rows by the value of some dimensions.
type filter struct {
	set  [numDims]bool
	vals [numDims]string
}

func (f filter) empty() bool {
	for _, s := range f.set {
		if s {
			return false
		}
	}
	return true
}

func (f filter) match(r *row) bool {
	for d := range numDims {
		if f.set[d] && r.vals[d] != f.vals[d] {
			return false
		}
	}
	return true
}

// matchEntry is the filter as a redrive selection.
func (f filter) matchEntry(e *dlq.Entry) bool {
	vals := [numDims]string{e.Reason(), e.URN(), e.Lang(), e.OriginalQueue(), ""}
	if f.set[dimFingerprint] {
		vals[dimFingerprint] = e.Fingerprint()
	}
	for d := range numDims {
		if f.set[d] && vals[d] != f.vals[d] {
			return false
		}
	}
	return true
}

// view is one page of a filtered snapshot.
type view struct {
	total    int // messages in the queue (indexed)
	matching int // messages the filter selects
	poison   int
	groups   [numDims][]group
	entries  []entry
	page     int
	pages    int
}

// pageSize is how many messages a page of the list shows.
const pageSize = 50

// filtered is the part of a snapshot a filter selects, with its groups.
type filtered struct {
	entries []entry
	groups  [numDims][]group
	poison  int
}

// maxFiltered bounds the filtered views a snapshot keeps (paging through one
// filter reads the snapshot once).
const maxFiltered = 16

func (s *snapshot) filter(f filter) *filtered {
	if f.empty() {
		return &filtered{entries: s.entries, groups: s.groups, poison: s.poison}
	}
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	if v, ok := s.views[f]; ok {
		return v
	}
	v := &filtered{}
	var t tally
	for _, e := range s.entries {
		if f.match(e.row) {
			v.entries = append(v.entries, e)
			t.add(e.row)
		}
	}
	v.groups, v.poison = t.groups(), t.poison
	if s.views == nil || len(s.views) >= maxFiltered {
		s.views = map[filter]*filtered{}
	}
	s.views[f] = v
	return v
}

func (s *snapshot) view(f filter, page int) view {
	fv := s.filter(f)
	v := view{total: len(s.entries), matching: len(fv.entries), poison: fv.poison, groups: fv.groups}
	v.pages = max((v.matching+pageSize-1)/pageSize, 1)
	v.page = min(max(page, 1), v.pages)
	lo := (v.page - 1) * pageSize
	v.entries = fv.entries[lo:min(lo+pageSize, v.matching)]
	return v
}

// errNotFound is the error of a message that is no longer where the page saw it.
var errNotFound = errors.New("the message is not on the queue any more (redriven, consumed or expired)")

// locate reads the message ref from the queue: at its place when the queue has not
// moved, else by walking the queue (up to the index bound).
func (c *Console) locate(ctx context.Context, b *brokerState, queue, id string, at transport.Cursor, pos int) (*transport.Delivery, error) {
	if pos >= 0 && pos < c.o.maxIndexed {
		p, err := transport.Browse(ctx, b.tr, queue, at, pos+1)
		if err != nil && !errors.Is(err, transport.ErrBadCursor) {
			return nil, err
		}
		if len(p.Deliveries) > pos && ref(p.Deliveries[pos]) == id {
			return p.Deliveries[pos], nil
		}
	}
	var found *transport.Delivery
	n := 0
	err := transport.BrowseAll(ctx, b.tr, queue, b.scanPage(c.o.maxIndexed), func(d *transport.Delivery) bool {
		n++
		if ref(d) == id {
			found = d
			return false
		}
		return n < c.o.maxIndexed
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, errNotFound
	}
	return found, nil
}
