package driverkit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// fakeRec is a record of a fake partitioned log, as a driver keeps it.
type fakeRec struct {
	logRec
	p *fakePart
}

// fakePart is a partition of the fake log, as a driver keeps it.
type fakePart struct {
	LogPartition[*fakeRec]
	key int
}

// fakeLog is a consumer of a fake log: the kit's bookkeeping, a ready list, and what
// the driver was told.
type fakeLog struct {
	mu       sync.Mutex
	lc       LogConsumer[*fakeRec, int, *fakePart]
	ready    Slabs[fakeRec]
	takeBack int // TakeBack calls
}

func newFakeLog(maxUncommitted int) *fakeLog {
	f := &fakeLog{}
	f.lc = LogConsumer[*fakeRec, int, *fakePart]{
		Offsets: Offsets[*fakeRec]{MaxUncommitted: maxUncommitted, MaxUncommittedTime: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Broker: "test"},
		Parts:    map[int]*fakePart{},
		PartOf:   func(r *fakeRec) *fakePart { return r.p },
		TakeBack: func() { f.takeBack++ },
	}
	return f
}

// fetch admits the records at offsets from to to-1 of partition key, as one slab.
func (f *fakeLog) fetch(key int, from, to int64) []*fakeRec {
	p := f.lc.Parts[key]
	if p == nil {
		p = &fakePart{LogPartition: NewLogPartition[*fakeRec](), key: key}
		f.lc.Parts[key] = p
	}
	slab := make([]fakeRec, to-from)
	var out []*fakeRec
	for i := range slab {
		r := &slab[i]
		r.Offset, r.p = from+int64(i), p
		if f.lc.Offsets.Admit(&p.LogPartition, r, LogBuffered) {
			out = append(out, r)
		}
	}
	f.ready.Push(slab)
	return out
}

// next hands out the next record, nil when none.
func (f *fakeLog) next() *fakeRec {
	rec, _, _ := f.lc.Next(f.ready.Pop)
	return rec
}

// TestLogConsumerHandsOutInOrder: Next hands out the ready records in order, skips one
// already fetched, stops at a full window and says when it is half full; Ack moves the
// mark that Marks reports, and a commit makes room and wakes a waiting Receive.
func TestLogConsumerHandsOutInOrder(t *testing.T) {
	f := newFakeLog(4)
	recs := f.fetch(0, 0, 3)
	if again := f.fetch(0, 1, 3); len(again) != 0 { // fetched already: dropped, and skipped
		t.Fatalf("records fetched again were admitted: %d", len(again))
	}
	f.fetch(0, 3, 6)
	var got []int64
	urgent := false
	for {
		rec, u, ok := f.lc.Next(f.ready.Pop)
		if !ok {
			break
		}
		urgent = urgent || u
		got = append(got, rec.Offset)
	}
	if len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Fatalf("handed out %v, want 0 1 2 3 (then the window is full)", got)
	}
	if !urgent {
		t.Error("a half-full window did not ask for a commit")
	}
	if f.lc.Ack(recs[1]) {
		t.Error("a record acknowledged behind an unsettled one moved the mark")
	}
	if !f.lc.Ack(recs[0]) {
		t.Error("acknowledging the first record did not move the mark")
	}
	wait := f.lc.Wait()
	marks := map[int]int64{}
	if n := f.lc.Marks(nil, func(k int, past *fakeRec) { marks[k] = past.Offset }); n != 1 || marks[0] != 1 {
		t.Fatalf("Marks = %d, %v; want partition 0 past offset 1", n, marks)
	}
	f.lc.Committed(0, 2)
	f.lc.CommitDone(nil)
	select {
	case <-wait:
	default:
		t.Error("a commit that succeeded did not wake Receive")
	}
	if rec := f.next(); rec == nil || rec.Offset != 4 {
		t.Errorf("after the commit: %v, want offset 4", rec)
	}
	if n := f.lc.Marks(nil, func(int, *fakeRec) {}); n != 0 {
		t.Errorf("Marks after the commit: %d, want none", n)
	}
}

// TestLogConsumerRewindSeeks: a rewind drops the later records (TakeBack), asks for a
// seek, due at once or at the end of the partition's hold, and Sought ends it.
func TestLogConsumerRewindSeeks(t *testing.T) {
	f := newFakeLog(100)
	f.fetch(0, 0, 4)
	f.fetch(1, 0, 2)
	var handed []*fakeRec
	for rec := f.next(); rec != nil; rec = f.next() {
		handed = append(handed, rec)
	}
	if len(handed) != 6 {
		t.Fatalf("handed out %d records, want 6", len(handed))
	}
	now := time.Now()
	f.lc.Parts[0].Hold(now.Add(time.Minute))
	wait, ok := f.lc.Rewind(handed[1], now)
	if !ok || wait <= 0 || wait > time.Minute {
		t.Fatalf("Rewind = %s, %v; want a wait for the hold", wait, ok)
	}
	if f.takeBack != 1 || handed[2].State != LogDropped || handed[3].State != LogDropped {
		t.Fatalf("the later records were not dropped and taken back (TakeBack %d, states %d %d)", f.takeBack, handed[2].State, handed[3].State)
	}
	if !f.lc.SeekWanted() {
		t.Fatal("no seek wanted after a rewind")
	}
	if due, hold := f.lc.SeekPlan(now); due || len(hold) != 1 || hold[0] != 0 || !f.lc.Parts[0].Held() {
		t.Fatalf("during the hold: SeekPlan = %v, %v; want partition 0 held, no seek due", due, hold)
	}
	if due, hold := f.lc.SeekPlan(now); due || len(hold) != 0 {
		t.Fatalf("SeekPlan again: %v, %v; want partition 0 not held anew", due, hold)
	}
	if seeks, _ := f.lc.DueSeeks(now); len(seeks) != 0 {
		t.Fatalf("during the hold: seeks %v due", seeks)
	}
	later := now.Add(time.Minute)
	if due, hold := f.lc.SeekPlan(later); !due || len(hold) != 0 {
		t.Fatalf("after the hold: SeekPlan = %v, %v; want a seek due", due, hold)
	}
	seeks, held := f.lc.DueSeeks(later)
	if len(seeks) != 1 || seeks[0] != handed[1] || len(held) != 1 || held[0] != 0 {
		t.Fatalf("after the hold: DueSeeks = %v, %v; want partition 0 to offset 1, held", seeks, held)
	}
	f.lc.Sought(seeks)
	if f.lc.SeekWanted() || f.lc.Parts[0].Held() || f.lc.Parts[0].Seeking() {
		t.Error("a seek is still wanted, or the partition held, after the seek was made")
	}
	if _, ok := f.lc.Rewind(handed[2], now); ok {
		t.Error("a dropped record was rewound")
	}
}

// TestLogConsumerRevoke: AwaitHanded stops handing out the records of the partitions
// being revoked and waits for those handed out to be settled; Forget drops the rest and
// the partitions, and reports a seek left unmade.
func TestLogConsumerRevoke(t *testing.T) {
	f := newFakeLog(100)
	f.fetch(0, 0, 2)
	f.fetch(1, 0, 2)
	first := f.next()
	go func() {
		time.Sleep(50 * time.Millisecond)
		f.mu.Lock()
		f.lc.Ack(first)
		f.mu.Unlock()
	}()
	start := time.Now()
	f.lc.AwaitHanded(&f.mu, map[int]bool{0: true}, 10*time.Second, nil)
	if d := time.Since(start); d < 40*time.Millisecond || d > 5*time.Second {
		t.Errorf("AwaitHanded returned after %s, want once the record was settled", d)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	other := f.next()
	if other == nil || other.p.key != 1 {
		t.Fatalf("a record of a partition being revoked was handed out: %v", other)
	}
	f.lc.Rewind(other, time.Now())
	seekOf := map[int]*fakeRec{}
	dropped := f.lc.Forget(map[int]bool{0: true, 1: true, 2: true}, func(k int, p *fakePart, seek *fakeRec) {
		if p.key != k {
			t.Errorf("Forget: partition %d under key %d", p.key, k)
		}
		seekOf[k] = seek
	})
	if dropped != 1 || len(f.lc.Parts) != 0 || seekOf[0] != nil || seekOf[1] != other || len(seekOf) != 2 {
		t.Errorf("Forget dropped %d records, left %d partitions, seeks %v; want 1, 0, partition 1's", dropped, len(f.lc.Parts), seekOf)
	}
	if f.lc.Offsets.Uncommitted() != 0 {
		t.Errorf("%d records uncommitted after every partition was forgotten", f.lc.Offsets.Uncommitted())
	}
}

// TestLogConsumerAwaitHandedEnds: AwaitHanded gives up at the grace, and at once once
// done is closed.
func TestLogConsumerAwaitHandedEnds(t *testing.T) {
	f := newFakeLog(100)
	f.fetch(0, 0, 1)
	f.next()
	start := time.Now()
	f.lc.AwaitHanded(&f.mu, map[int]bool{0: true}, 30*time.Millisecond, nil)
	if d := time.Since(start); d < 30*time.Millisecond || d > 5*time.Second {
		t.Errorf("AwaitHanded returned after %s, want the grace (30ms)", d)
	}
	done := make(chan struct{})
	close(done)
	start = time.Now()
	f.lc.AwaitHanded(&f.mu, map[int]bool{0: true}, time.Minute, done)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("AwaitHanded waited %s after done was closed", d)
	}
}

// TestLogConsumerWaitIdle: WaitIdle waits for the settle writes in flight, or for its
// context.
func TestLogConsumerWaitIdle(t *testing.T) {
	f := newFakeLog(100)
	f.fetch(0, 0, 1)
	rec := f.next()
	if err := f.lc.WaitIdle(context.Background(), &f.mu); err != nil {
		t.Fatalf("WaitIdle with nothing in flight: %v", err)
	}
	f.lc.Offsets.Set(rec, LogSettling)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.lc.WaitIdle(ctx, &f.mu); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle with a write in flight: %v, want the context's end", err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		f.mu.Lock()
		f.lc.Ack(rec)
		f.mu.Unlock()
	}()
	if err := f.lc.WaitIdle(context.Background(), &f.mu); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	if !f.mu.TryLock() {
		t.Fatal("WaitIdle kept the lock")
	}
	f.mu.Unlock()
}

// TestSlabs: records come out in the order their slabs went in; an empty slab is
// ignored.
func TestSlabs(t *testing.T) {
	var q Slabs[int]
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop of an empty list")
	}
	q.Push([]int{1, 2})
	q.Push(nil)
	q.Push([]int{3})
	if q.Len() != 3 {
		t.Fatalf("Len = %d, want 3", q.Len())
	}
	for want := 1; want <= 3; want++ {
		if v, ok := q.Pop(); !ok || *v != want {
			t.Fatalf("Pop = %v, %v; want %d", v, ok, want)
		}
	}
	if _, ok := q.Pop(); ok || q.Len() != 0 {
		t.Fatal("records left after every one was popped")
	}
}
