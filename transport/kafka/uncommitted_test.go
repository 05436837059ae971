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
	c := &consumer{t: tr, queue: "q", log: slog.New(slog.NewTextHandler(io.Discard, nil)), parts: map[tp]*partition{},
		wake: make(chan struct{}), commitSig: make(chan struct{}, 1), pollSig: make(chan struct{}, 1),
		delaySig: make(chan struct{}, 1), urgentSig: make(chan struct{}, 1)}
	if c.kit, err = driverkit.New[*record](c, driverkit.Config{Broker: "kafka", Queue: "q"}, transport.ConsumeOptions{Prefetch: n}); err != nil {
		t.Fatal(err)
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: "q", Offset: int64(i)}
	}
	c.admitLocked(tp{"q", 0}, 0, rs)
	return c, c.parts[tp{"q", 0}]
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
		if c.uncommitted != uncommitted {
			t.Fatalf("%s: %d records uncommitted, want %d", step, c.uncommitted, uncommitted)
		}
	}
	expect("up to the bound", []int64{take(), take(), take(), take(), take()}, []int64{0, 1, 2, 3, -1}, 4)
	select {
	case <-c.urgentSig:
	default:
		t.Error("a half-full window did not ask for a commit")
	}
	c.committedLocked(p, 2) // offsets 0 and 1 committed
	expect("after a commit", []int64{take(), take(), take()}, []int64{4, 5, -1}, 4)
	c.rewindLocked(handed[3]) // offset 3: it and every later record come again
	expect("after a rewind", []int64{take()}, []int64{-1}, 1)
	c.forget(map[tp]bool{p.tp: true}, "lost")
	expect("after the partition was lost", nil, nil, 0)
}

// TestUncommittedTimeStopsHandingOut decides, for the age of the oldest commit attempt
// that has not succeeded and the records uncommitted, whether the consumer goes on
// handing out records.
func TestUncommittedTimeStopsHandingOut(t *testing.T) {
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
			c, _ := windowConsumer(t, 1, WithMaxUncommitted(1000), WithMaxUncommittedTime(10*time.Second))
			c.uncommitted = tc.uncommitted
			if tc.failingFor > 0 {
				c.commitFrom = time.Now().Add(-tc.failingFor)
			}
			if got := c.nextLocked() == nil; got != tc.stop {
				t.Errorf("stops handing out: %v, want %v", got, tc.stop)
			}
		})
	}
}
