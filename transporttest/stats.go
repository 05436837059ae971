package transporttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// StatsOptions describes how a broker counts, for [RunStats].
type StatsOptions struct {
	// AlwaysExists says the broker has no queue to create, so every queue exists
	// (Redis).
	AlwaysExists bool
	// ReadyCountsInFlight says a message a consumer holds stays in Ready until it is
	// settled (Kafka: Ready is what the group has not committed).
	ReadyCountsInFlight bool
	// Wait bounds how long a count may lag a change (eventually consistent counts).
	// Default 10s.
	Wait time.Duration
	// Oldest says where the broker's QueueStats.Oldest comes from.
	Oldest OldestSource
}

// OldestSource says how a broker tells when its oldest ready message was written.
type OldestSource int

const (
	// OldestUnknown: the broker cannot tell; Oldest stays zero.
	OldestUnknown OldestSource = iota
	// OldestCreatedAt: Oldest is the first ready message's meta.created_at (or the
	// native time the binding projects it onto).
	OldestCreatedAt
	// OldestWritten: Oldest is the broker's own time of the write.
	OldestWritten
)

// RunStats checks the [transport.QueueStatter] of the transport cfg opens against its
// broker: a queue nobody wrote to does not exist (or is empty) and counting it creates
// nothing; messages written are Ready; a message a consumer holds is InFlight where
// the broker can tell, and leaves Ready where it should; an acknowledged one is gone
// from every count; a delayed one is Delayed where the broker can tell; Appended, where
// known, grows by what was written and never shrinks.
func RunStats(t *testing.T, cfg Config, opts StatsOptions) {
	cfg.defaults()
	if opts.Wait == 0 {
		opts.Wait = 10 * time.Second
	}
	tr := open(t, cfg)
	if _, ok := tr.(transport.QueueStatter); !ok {
		t.Fatalf("%T does not implement transport.QueueStatter", tr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stats := func(q string) transport.QueueStats {
		t.Helper()
		s, err := transport.Stats(ctx, tr, q)
		if err != nil {
			t.Fatalf("QueueStats(%q): %v", q, err)
		}
		return s
	}
	// eventually polls until ok holds, then returns the stats it held for.
	eventually := func(q, what string, ok func(transport.QueueStats) bool) transport.QueueStats {
		t.Helper()
		deadline := time.Now().Add(opts.Wait)
		for {
			s := stats(q)
			if ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after %v the stats of %q are %+v", what, opts.Wait, q, s)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	missing := cfg.NewQueue(t)
	s := stats(missing)
	if s.Exists != opts.AlwaysExists || s.Ready > 0 || s.InFlight > 0 || s.Delayed > 0 || s.Appended > 0 {
		t.Errorf("a queue nobody wrote to: %+v (want Exists %v and no message)", s, opts.AlwaysExists)
	}
	if p, err := transport.Browse(ctx, tr, missing, "", 1); err == nil && len(p.Deliveries) > 0 {
		t.Errorf("counting %q put a message on it", missing)
	}

	q := cfg.NewQueue(t)
	const n = 5
	var ms []*transport.Message
	for i := range n {
		ms = append(ms, &transport.Message{Queue: q, Body: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if err := transport.PublishConfirmed(ctx, tr, ms); err != nil {
		t.Fatal(err)
	}
	s = eventually(q, "5 written", func(s transport.QueueStats) bool { return s.Exists && s.Ready == n })
	appended := s.Appended
	if appended != transport.UnknownCount && appended != n {
		t.Errorf("Appended %d after %d writes to a new queue", appended, n)
	}
	if s.InFlight > 0 || s.Delayed > 0 {
		t.Errorf("5 written, none received or delayed: %+v", s)
	}

	c := consume(t, cfg, tr, q)
	rctx, rcancel := context.WithTimeout(ctx, cfg.ReceiveTimeout)
	d, err := c.Receive(rctx)
	rcancel()
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	// A consumer may take more than one (its prefetch): what it holds is what left
	// Ready, and no more than was written.
	s = eventually(q, "one received", func(s transport.QueueStats) bool {
		if opts.ReadyCountsInFlight {
			return s.Ready == n
		}
		return s.Ready < n && (s.InFlight == transport.UnknownCount || s.InFlight == n-s.Ready)
	})
	if s.InFlight != transport.UnknownCount && s.InFlight < 1 {
		t.Errorf("a message is held by a consumer, InFlight is %d", s.InFlight)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	eventually(q, "one acknowledged, the consumer closed", func(s transport.QueueStats) bool {
		return s.Ready == n-1 && s.InFlight <= 0
	})

	if caps := tr.Capabilities(); caps.Delay {
		delay := 10 * time.Minute
		if caps.MaxDelay > 0 {
			delay = min(delay, caps.MaxDelay)
		}
		dq := cfg.NewQueue(t)
		if err := transport.PublishConfirmed(ctx, tr, []*transport.Message{{Queue: dq, Body: []byte(`{"later":true}`), Delay: delay}}); err != nil {
			t.Fatal(err)
		}
		s = stats(dq)
		if s.Delayed != transport.UnknownCount {
			s = eventually(dq, "one delayed", func(s transport.QueueStats) bool { return s.Delayed == 1 })
			if s.Ready != 0 {
				t.Errorf("a delayed message counts as ready: %+v", s)
			}
		}
	}

	if appended != transport.UnknownCount {
		if err := transport.PublishConfirmed(ctx, tr, ms[:2]); err != nil {
			t.Fatal(err)
		}
		eventually(q, "two more written", func(s transport.QueueStats) bool { return s.Appended == appended+2 })
	}

	checkOldest(t, cfg, tr, opts, stats, eventually)
}

// checkOldest writes two envelopes whose meta.created_at runs backwards (the first
// written is 30 minutes old, the second an hour old) to a queue a consumer has opened
// and closed (as a worker would have: Pulsar counts a subscription's backlog), and
// checks QueueStats.Oldest:
// the first message's created_at, or the time it was written, as the broker tells it;
// and that every partition's lag adds up to Ready.
func checkOldest(t *testing.T, cfg Config, tr transport.Transport, opts StatsOptions,
	stats func(string) transport.QueueStats, eventually func(string, string, func(transport.QueueStats) bool) transport.QueueStats) {
	t.Helper()
	q := cfg.NewQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := consume(t, cfg, tr, q).Close(ctx); err != nil {
		t.Fatal(err)
	}
	if age, ok := stats(q).OldestAge(time.Now()); !ok || age != 0 {
		t.Errorf("an empty queue: OldestAge %v, %v (want 0, true)", age, ok)
	}
	now := time.Now()
	first, second := now.Add(-30*time.Minute).Truncate(time.Millisecond), now.Add(-time.Hour).Truncate(time.Millisecond)
	var ms []*transport.Message
	for i, at := range []time.Time{first, second} {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		body := fmt.Sprintf(`{"job":"urn:babel:stats:oldest","trace_id":%q,"data":{"n":%d},"meta":{"id":%q,"queue":%q,"lang":"go","schema_version":1,"created_at":%d},"attempts":0}`,
			id, i, id, q, at.UnixMilli())
		ms = append(ms, &transport.Message{Queue: q, Body: []byte(body), Projection: transport.Projection{
			URN: "urn:babel:stats:oldest", TraceID: id, MessageID: id, Lang: "go", SchemaVersion: 1, CreatedAt: at.UnixMilli()}})
	}
	before := time.Now()
	for _, m := range ms { // one at a time: the first is written first
		if err := transport.PublishConfirmed(ctx, tr, []*transport.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now()
	s := eventually(q, "two envelopes written", func(s transport.QueueStats) bool {
		return s.Ready == 2 && (opts.Oldest == OldestUnknown || !s.Oldest.IsZero())
	})
	const slack = 5 * time.Second
	switch opts.Oldest {
	case OldestUnknown:
		if !s.Oldest.IsZero() {
			t.Errorf("Oldest is %v where the broker cannot tell", s.Oldest)
		}
		if _, ok := s.OldestAge(time.Now()); ok {
			t.Errorf("OldestAge is known where the broker cannot tell")
		}
	case OldestCreatedAt:
		if d := s.Oldest.Sub(first).Abs(); d > slack {
			t.Errorf("Oldest %v, want the first message's created_at %v (the head, not the oldest created_at behind it)", s.Oldest, first)
		}
	case OldestWritten:
		if s.Oldest.Before(before.Add(-slack)) || s.Oldest.After(after.Add(slack)) {
			t.Errorf("Oldest %v, want when the first message was written (between %v and %v)", s.Oldest, before, after)
		}
	}
	if age, ok := s.OldestAge(time.Now()); opts.Oldest != OldestUnknown && (!ok || age <= 0) {
		t.Errorf("OldestAge %v, %v with two messages waiting", age, ok)
	}
	if len(s.Partitions) > 0 {
		var lag int64
		oldest := time.Time{}
		for _, p := range s.Partitions {
			lag += p.Lag
			if p.Lag > 0 && (oldest.IsZero() || p.Oldest.Before(oldest)) {
				oldest = p.Oldest
			}
			if (p.Lag == 0) != p.Oldest.IsZero() && opts.Oldest != OldestUnknown {
				t.Errorf("partition %d: lag %d, oldest %v", p.Partition, p.Lag, p.Oldest)
			}
		}
		if lag != s.Ready {
			t.Errorf("the partitions' lag adds up to %d, Ready is %d", lag, s.Ready)
		}
		if !oldest.Equal(s.Oldest) {
			t.Errorf("the partitions' oldest is %v, Oldest is %v", oldest, s.Oldest)
		}
	}
}
