package servicebus

import (
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestStatsWithoutAdmin: a transport built around a client, with no administration
// client, says it cannot count rather than guessing.
func TestStatsWithoutAdmin(t *testing.T) {
	tr := openFake(t, newFakeBroker())
	_, err := tr.QueueStats(t.Context(), "orders")
	var ce *transport.CannotCountError
	if !errors.Is(err, transport.ErrCannotCount) || !errors.As(err, &ce) || ce.Reason == "" {
		t.Fatalf("QueueStats without an administration client: %v", err)
	}
}

// TestStatsFollowTheQueues: round after round, a backlog that grows and a dead-letter
// queue that fills move the counts queuestats.Take reads through the administration
// client (what the console, `babelqueue stats` and the metrics' QueueCollector show),
// and they are the fake broker's own: ready, locked and scheduled messages, the
// runtime's dead-letter queue, and the first active message's enqueue time.
func TestStatsFollowTheQueues(t *testing.T) {
	b := newFakeBroker()
	tr := openFake(t, b, WithAdminClient(b.adminClient(t)))
	ctx := t.Context()
	start := time.Now()
	for round := 1; round <= 3; round++ {
		for range 4 {
			if err := tr.Publish(ctx, &transport.Message{Queue: "orders", Body: []byte(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := tr.Publish(ctx, &transport.Message{Queue: "orders.dlq", Body: []byte(`{"n":2}`)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Publish(ctx, &transport.Message{Queue: "orders", Body: []byte(`{"n":3}`), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		s, err := queuestats.Take(ctx, tr, queuestats.Queue{Name: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		waiting, locked := b.counts("orders")
		if s.Stats.Ready != int64(4*round) || s.Stats.Delayed != int64(round) || s.DeadLettered() != int64(2*round) ||
			int64(waiting+locked) != s.Stats.Ready+s.Stats.Delayed {
			t.Errorf("round %d: %+v, dead-lettered %d; the fake holds %d waiting, %d locked", round, s.Stats, s.DeadLettered(), waiting, locked)
		}
		if s.Stats.Oldest.Before(start) || s.Stats.Oldest.After(time.Now()) {
			t.Errorf("round %d: Oldest %v, not the first message's enqueue time", round, s.Stats.Oldest)
		}
	}
}
