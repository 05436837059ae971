package kafka

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// windowConsumer is a consumer without a client: one partition of the queue with the
// records at offsets 0 to n-1 admitted to its ready list.
func windowConsumer(t *testing.T, n int, opts ...Option) (*consumer, *partition) {
	t.Helper()
	tr, err := newTransport(nil, false, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := newConsumer(tr, "q", log, 0)
	if c.kit, err = driverkit.New[*record](c, driverkit.Config{Broker: "kafka", Queue: "q"}, transport.ConsumeOptions{Prefetch: n}); err != nil {
		t.Fatal(err)
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: "q", Offset: int64(i)}
	}
	c.admitLocked(tp{"q", 0}, 0, c.slab(rs, 0))
	return c, c.lc.Parts[tp{"q", 0}]
}

// TestUncommittedWindowStopsHandingOut: the consumer hands out records while fewer than
// max_uncommitted are handed out beyond the committed offset; a commit, a rewind and a
// partition taken away move the window, and half a window asks for a commit at once.
func TestUncommittedWindowStopsHandingOut(t *testing.T) {
	c, p := windowConsumer(t, 10, WithMaxUncommitted(4), WithMaxUncommittedTime(time.Hour))
	var handed []*record
	take := func() int64 {
		rec := c.nextLocked()
		if rec == nil {
			return -1
		}
		handed = append(handed, rec)
		return rec.r.Offset
	}
	expect := func(step string, got []int64, want []int64, uncommitted int) {
		t.Helper()
		for i := range want {
			if i >= len(got) || got[i] != want[i] {
				t.Fatalf("%s: handed out %v, want %v", step, got, want)
			}
		}
		if c.lc.Offsets.Uncommitted() != uncommitted {
			t.Fatalf("%s: %d records uncommitted, want %d", step, c.lc.Offsets.Uncommitted(), uncommitted)
		}
	}
	expect("up to the bound", []int64{take(), take(), take(), take(), take()}, []int64{0, 1, 2, 3, -1}, 4)
	select {
	case <-c.urgentSig:
	default:
		t.Error("a half-full window did not ask for a commit")
	}
	c.lc.Offsets.Committed(&p.LogPartition, 2) // offsets 0 and 1 committed
	expect("after a commit", []int64{take(), take(), take()}, []int64{4, 5, -1}, 4)
	c.rewindLocked(handed[3]) // offset 3: it and every later record come again
	expect("after a rewind", []int64{take()}, []int64{-1}, 1)
	c.forget(map[tp]bool{p.tp: true}, "lost")
	expect("after the partition was lost", nil, nil, 0)
}

// TestSettledRecordsLetGoOfTheirBodies: a record settled in offset order lets go of its
// value, key and headers (its struct stays in a slab beside records still in use, which
// kept the bodies of a whole slab reachable); one settled behind an unsettled record,
// and the unsettled one, keep theirs until they are passed.
func TestSettledRecordsLetGoOfTheirBodies(t *testing.T) {
	c, p := windowConsumer(t, 3, WithMaxUncommittedTime(time.Hour))
	for _, rec := range p.Pending() {
		rec.r.Value, rec.r.Key = []byte(`{"job":"urn:babel:orders:created"}`), []byte("k")
		rec.r.Headers = []kgo.RecordHeader{{Key: HeaderAttempts, Value: []byte("0")}}
	}
	first, second, third := c.nextLocked(), c.nextLocked(), c.nextLocked()
	kept := func(rec *record) bool { return rec.r.Value != nil || rec.r.Key != nil || rec.r.Headers != nil }
	c.ackLocked(second)
	if !kept(second) || !kept(first) || !kept(third) {
		t.Fatal("a record settled behind an unsettled one let go of its body")
	}
	c.ackLocked(first)
	if kept(first) || kept(second) {
		t.Error("records settled and passed still hold their bodies")
	}
	if !kept(third) {
		t.Error("a record not yet settled lost its body")
	}
	if first.r.Offset != 0 || second.r.Offset != 1 {
		t.Error("a record that let go of its body lost its offset")
	}
}
