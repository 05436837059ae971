package queuestats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

func publish(t *testing.T, tr transport.Transport, queue string, created time.Time) {
	t.Helper()
	e, err := envelope.Make("urn:babel:orders:created", map[string]int{"n": 1}, envelope.WithQueue(queue), envelope.WithCreatedAt(created))
	if err != nil {
		t.Fatal(err)
	}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(context.Background(), &transport.Message{Queue: queue, Body: body}); err != nil {
		t.Fatal(err)
	}
}

// Take counts a queue and the dead-letter queue the runtime writes to (or the one
// named), and tells the age of the oldest ready message at the moment it counted.
func TestTake(t *testing.T) {
	ctx := context.Background()
	tr := memory.New()
	created := time.Now().Add(-time.Hour)
	publish(t, tr, "orders", created)
	publish(t, tr, "orders", time.Now())
	for _, q := range []string{"orders.dlq", "orders.dlq", "orders.dlq", "elsewhere"} {
		publish(t, tr, q, time.Now())
	}
	s, err := queuestats.Take(ctx, tr, queuestats.Queue{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Queue != "orders" || s.DLQ != "orders.dlq" || s.Stats.Ready != 2 || s.DeadLettered() != 3 {
		t.Errorf("Take: %+v (dead-lettered %d)", s, s.DeadLettered())
	}
	if age, ok := s.OldestAge(); !ok || age != s.At.Sub(time.UnixMilli(created.UnixMilli())) {
		t.Errorf("OldestAge %v, %v; want the head's hour at %v", age, ok, s.At)
	}
	s, err = queuestats.Take(ctx, tr, queuestats.Queue{Name: "orders", DLQ: "elsewhere"})
	if err != nil || s.DLQ != "elsewhere" || s.DeadLettered() != 1 {
		t.Errorf("Take with a DLQ named: %+v, %v", s, err)
	}
	s, err = queuestats.Take(ctx, tr, queuestats.Queue{Name: "nobody"})
	if err != nil || s.Stats.Exists || s.DeadLettered() != 0 {
		t.Errorf("a queue nobody wrote to: %+v, %v", s, err)
	}
	if age, ok := s.OldestAge(); !ok || age != 0 {
		t.Errorf("an empty queue's OldestAge: %v, %v", age, ok)
	}
	if _, err := queuestats.Take(ctx, tr, queuestats.Queue{}); err == nil {
		t.Error("a queue without a name was counted")
	}
	if _, err := queuestats.Take(ctx, blind{tr}, queuestats.Queue{Name: "orders"}); !errors.Is(err, transport.ErrCannotCount) {
		t.Errorf("a transport that cannot count: %v", err)
	}
}

// blind is a transport without QueueStats.
type blind struct{ transport.Transport }

// OldestAge tells an unknown age from an empty queue.
func TestOldestAge(t *testing.T) {
	at := time.Now()
	for _, c := range []struct {
		s    transport.QueueStats
		age  time.Duration
		know bool
	}{
		{transport.QueueStats{Ready: 0}, 0, true},
		{transport.QueueStats{Ready: 3, Oldest: at.Add(-time.Minute)}, time.Minute, true},
		{transport.QueueStats{Ready: 3}, 0, false},
		{transport.QueueStats{Ready: transport.UnknownCount, Oldest: at}, 0, false},
		{transport.QueueStats{Ready: 1, Oldest: at.Add(time.Second)}, 0, true}, // a clock ahead: never below 0
	} {
		if age, ok := c.s.OldestAge(at); age != c.age || ok != c.know {
			t.Errorf("%+v: %v, %v; want %v, %v", c.s, age, ok, c.age, c.know)
		}
	}
	p := transport.PartitionStats{Lag: 2}
	if _, ok := p.LagAge(at); ok {
		t.Error("a lag without a timestamp has an age")
	}
	p = transport.PartitionStats{Lag: 0}
	if age, ok := p.LagAge(at); !ok || age != 0 {
		t.Errorf("no lag: %v, %v", age, ok)
	}
}
