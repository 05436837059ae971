package driverkit

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// logRec is a record of a partitioned log as a driver keeps it.
type logRec struct {
	LogEntry
	Offset   int64
	released bool
}

func (r *logRec) LogOffset() int64 { return r.Offset }

// logOf returns the bookkeeping of one partition holding the records at offsets 0 to
// n-1, admitted and waiting to be handed out.
func logOf(t *testing.T, n int, o *Offsets[*logRec]) (*LogPartition[*logRec], []*logRec) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Broker = "test"
	o.Passed = func(r *logRec) { r.released = true }
	p := NewLogPartition[*logRec]()
	recs := make([]*logRec, n)
	for i := range recs {
		recs[i] = &logRec{Offset: int64(i)}
		if !o.Admit(&p, recs[i], LogBuffered) {
			t.Fatalf("record %d not admitted", i)
		}
	}
	return &p, recs
}

// TestOffsetsWindowStopsHandingOut: records are handed out while fewer than
// MaxUncommitted are beyond the committed offset; a commit, a rewind and a partition
// taken away move the window, and half a window asks for a commit at once.
func TestOffsetsWindowStopsHandingOut(t *testing.T) {
	o := &Offsets[*logRec]{MaxUncommitted: 4, MaxUncommittedTime: time.Hour}
	p, recs := logOf(t, 10, o)
	next := 0
	urgent := false
	take := func() int64 { // the next record still buffered, as a driver's ready list
		if o.Full() {
			return -1
		}
		for ; next < len(recs); next++ {
			if recs[next].State == LogBuffered {
				urgent = o.Hand(p, recs[next]) || urgent
				next++
				return int64(next - 1)
			}
		}
		return -1
	}
	expect := func(step string, got, want []int64, uncommitted int) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: handed out %v, want %v", step, got, want)
		}
		if o.Uncommitted() != uncommitted {
			t.Fatalf("%s: %d records uncommitted, want %d", step, o.Uncommitted(), uncommitted)
		}
	}
	expect("up to the bound", []int64{take(), take(), take(), take(), take()}, []int64{0, 1, 2, 3, -1}, 4)
	if !urgent {
		t.Error("a half-full window did not ask for a commit")
	}
	o.Committed(p, 2) // offsets 0 and 1 committed
	expect("after a commit", []int64{take(), take(), take()}, []int64{4, 5, -1}, 4)
	if _, _, ok := o.Rewind(p, recs[3], time.Now()); !ok {
		t.Fatal("a tracked record was not rewound")
	}
	expect("after a rewind", []int64{take()}, []int64{-1}, 1)
	if n, _ := o.Forget(p); n != 3 {
		t.Errorf("Forget dropped %d records, want 3 (offsets 0 to 2)", n)
	}
	expect("after the partition was lost", nil, nil, 0)
}

// TestOffsetsTimeStopsHandingOut decides, for the age of the oldest commit attempt that
// has not succeeded and the records uncommitted, whether the consumer goes on handing
// out records.
func TestOffsetsTimeStopsHandingOut(t *testing.T) {
	cases := []struct {
		name        string
		failingFor  time.Duration // 0: the last commit succeeded
		uncommitted int
		stop        bool
	}{
		{"commits succeed", 0, 0, false},
		{"a commit failing for less than the bound", 100 * time.Millisecond, 1, false},
		{"a commit failing for longer than the bound", 20 * time.Second, 1, true},
		{"the records bound, commits succeeding", 0, 1000, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &Offsets[*logRec]{MaxUncommitted: 1000, MaxUncommittedTime: 10 * time.Second,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			o.uncommitted = tc.uncommitted
			if tc.failingFor > 0 {
				o.commitFrom = time.Now().Add(-tc.failingFor)
			}
			if got := o.Full(); got != tc.stop {
				t.Errorf("stops handing out: %v, want %v", got, tc.stop)
			}
		})
	}
}

// TestOffsetsMarkSkipsNoGap: the commit mark moves past the settled records at the
// head of the partition only; a record settled behind an unsettled one waits for it,
// and only the records passed are let go of.
func TestOffsetsMarkSkipsNoGap(t *testing.T) {
	cases := []struct {
		name  string
		acks  []int   // the offsets acknowledged, in order
		marks []int64 // the offset committable after each ack; -1: none yet
	}{
		{"in order", []int{0, 1, 2}, []int64{1, 2, 3}},
		{"a gap filled last", []int{1, 2, 0}, []int64{-1, -1, 3}},
		{"a gap in the middle", []int{0, 2, 1}, []int64{1, 1, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &Offsets[*logRec]{MaxUncommitted: 100, MaxUncommittedTime: time.Hour}
			p, recs := logOf(t, 3, o)
			for _, r := range recs {
				o.Hand(p, r)
			}
			for i, a := range tc.acks {
				o.Ack(p, recs[a])
				got := int64(-1)
				if m, ok := p.Mark(); ok {
					got = m.Offset + 1
				}
				if got != tc.marks[i] {
					t.Fatalf("after acking %v: committable up to %d, want %d", tc.acks[:i+1], got, tc.marks[i])
				}
				for _, r := range recs {
					if passed := r.Offset < got; r.released != passed {
						t.Fatalf("after acking %v: record %d let go %v, want %v", tc.acks[:i+1], r.Offset, r.released, passed)
					}
				}
			}
			o.Committed(p, 3)
			if _, ok := p.Mark(); ok {
				t.Error("a mark committed already is offered again")
			}
			if o.Uncommitted() != 0 {
				t.Errorf("%d records uncommitted after the commit, want 0", o.Uncommitted())
			}
		})
	}
}

// TestOffsetsRewind: a rewind drops the later records, asks for a seek to the earliest
// record rewound (after the partition's hold), refuses the records fetched before the
// seek, and accepts the rewound record again once sought.
func TestOffsetsRewind(t *testing.T) {
	o := &Offsets[*logRec]{MaxUncommitted: 100, MaxUncommittedTime: time.Hour}
	p, recs := logOf(t, 5, o)
	for _, r := range recs {
		o.Hand(p, r)
	}
	now := time.Now()
	dropped, wait, ok := o.Rewind(p, recs[3], now)
	if !ok || !dropped || wait != 0 {
		t.Fatalf("Rewind(3) = dropped %v, wait %s, ok %v; want true, 0, true", dropped, wait, ok)
	}
	if recs[3].State != LogRewound || recs[4].State != LogDropped {
		t.Fatalf("states %d, %d; want rewound, dropped", recs[3].State, recs[4].State)
	}
	p.Hold(now.Add(time.Minute))
	if _, wait, _ = o.Rewind(p, recs[1], now); wait != time.Minute {
		t.Errorf("a rewind during a hold waits %s, want the hold's minute", wait)
	}
	if at, due := p.Seek(now); at != recs[1] || due {
		t.Errorf("Seek = %v, due %v; want record 1, not due during the hold", at, due)
	}
	if at, due := p.Seek(now.Add(time.Minute)); at != recs[1] || !due {
		t.Errorf("Seek after the hold = %v, due %v; want record 1, due", at, due)
	}
	if !p.Seeking() {
		t.Fatal("a partition waiting for its seek does not say so")
	}
	if p.Sought(recs[3]) || !p.Sought(recs[1]) || p.Seeking() {
		t.Fatal("Sought cleared the wrong seek")
	}
	again := &logRec{Offset: 1}
	if !o.Admit(p, again, LogBuffered) {
		t.Error("the rewound record, fetched again, was not admitted")
	}
	if old := (&logRec{Offset: 0}); o.Admit(p, old, LogBuffered) || old.State != LogDropped {
		t.Error("a record fetched already was admitted")
	}
	if _, _, ok := o.Rewind(p, recs[4], now); ok || recs[4].State != LogDropped {
		t.Error("a record no longer tracked was rewound")
	}
	if !o.Handed(p) {
		t.Error("record 0, handed out, is not reported")
	}
	o.Ack(p, recs[0])
	if o.Handed(p) {
		t.Error("no record is in hand, yet Handed says one is")
	}
}

// TestOffsetsIdle: Idle is closed once the last settle write in flight ends.
func TestOffsetsIdle(t *testing.T) {
	o := &Offsets[*logRec]{MaxUncommitted: 100, MaxUncommittedTime: time.Hour}
	p, recs := logOf(t, 2, o)
	if o.Idle() != nil {
		t.Fatal("Idle with no write in flight is not nil")
	}
	for _, r := range recs {
		o.Hand(p, r)
		o.Set(r, LogSettling)
	}
	idle := o.Idle()
	o.Set(recs[0], LogHanded)
	select {
	case <-idle:
		t.Fatal("Idle closed with a write in flight")
	default:
	}
	o.Ack(p, recs[1])
	if o.Writing() != 0 {
		t.Fatalf("%d writes in flight, want 0", o.Writing())
	}
	select {
	case <-idle:
	default:
		t.Fatal("Idle not closed once the writes ended")
	}
}

// TestOffsetsStallLogged: a window full while commits fail is logged once, and the
// consumer going on again once.
func TestOffsetsStallLogged(t *testing.T) {
	var b strings.Builder
	o := &Offsets[*logRec]{MaxUncommitted: 1, MaxUncommittedTime: time.Hour, Logger: slog.New(slog.NewTextHandler(&b, nil))}
	p, recs := logOf(t, 1, o)
	o.Hand(p, recs[0])
	o.Committing(true, true)
	if o.CommitDone(errors.New("boom")) {
		t.Error("a failed commit woke the consumer")
	}
	for range 3 {
		if !o.Full() {
			t.Fatal("a full window lets records through")
		}
	}
	o.Committed(p, 1)
	if !o.CommitDone(nil) || o.Full() {
		t.Fatal("a successful commit did not open the window")
	}
	if got := strings.Count(b.String(), "commits fail"); got != 1 {
		t.Errorf("the stall was logged %d times, want once:\n%s", got, b.String())
	}
	if got := strings.Count(b.String(), "commits caught up"); got != 1 {
		t.Errorf("the recovery was logged %d times, want once:\n%s", got, b.String())
	}
}

// BenchmarkOffsets: one record through a partition's bookkeeping: admitted, handed out
// under the window's check, acknowledged in order and committed.
func BenchmarkOffsets(b *testing.B) {
	o := &Offsets[*logRec]{MaxUncommitted: 20000, MaxUncommittedTime: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Passed: func(r *logRec) { r.released = true }}
	p := NewLogPartition[*logRec]()
	recs := make([]logRec, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := &recs[i%len(recs)]
		*r = logRec{Offset: int64(i)}
		o.Admit(&p, r, LogBuffered)
		if o.Full() {
			b.Fatal("the window filled")
		}
		o.Hand(&p, r)
		o.Ack(&p, r)
		if i%1000 == 999 {
			m, _ := p.Mark()
			o.Committed(&p, m.Offset+1)
		}
	}
}
