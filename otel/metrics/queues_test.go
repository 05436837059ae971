package metrics_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// newCollector is a QueueCollector of queues on tr exported to a new Prometheus, both
// closed when the test ends.
func newCollector(t *testing.T, tr transport.Transport, queues []queuestats.Queue, opts ...metrics.Option) (*metrics.Prometheus, *metrics.QueueCollector) {
	t.Helper()
	prom, err := metrics.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Shutdown(context.Background()) })
	qc, err := metrics.NewQueueCollector(tr, queues, append([]metrics.Option{metrics.WithMeterProvider(prom.MeterProvider()), metrics.WithLogger(quiet())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qc.Close() })
	return prom, qc
}

// envelopeAt is an envelope for queue made at created.
func envelopeAt(t *testing.T, queue string, created time.Time) *transport.Message {
	t.Helper()
	e, err := envelope.Make(orderCreated, map[string]int{"n": 1}, envelope.WithQueue(queue), envelope.WithCreatedAt(created))
	if err != nil {
		t.Fatal(err)
	}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &transport.Message{Queue: queue, Body: body}
}

// A backlog that grows and a dead-letter queue that fills move the gauges, and the
// gauges are what queuestats.Take counts.
func TestQueueCollectorFollowsTheQueues(t *testing.T) {
	ctx := context.Background()
	tr := memory.New()
	prom, qc := newCollector(t, tr, []queuestats.Queue{{Name: "orders"}, {Name: "billing", DLQ: "billing-dead"}})
	labels := map[string]string{"queue": "orders"}

	for round := 1; round <= 3; round++ {
		for range 2 {
			if err := tr.Publish(ctx, envelopeAt(t, "orders", time.Now().Add(-time.Minute))); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Publish(ctx, &transport.Message{Queue: "orders.dlq", Body: []byte(`{"raw":"x"}`)}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Publish(ctx, &transport.Message{Queue: "billing-dead", Body: []byte(`{"raw":"y"}`)}); err != nil {
			t.Fatal(err)
		}
		qc.Collect(ctx)
		fams := scrape(t, prom.Handler())
		if got := value(fams, "babelqueue_queue_messages_ready", labels); got != float64(2*round) {
			t.Errorf("round %d: ready %v, want %d", round, got, 2*round)
		}
		if got := value(fams, "babelqueue_queue_messages_dead_lettered", labels); got != float64(round) {
			t.Errorf("round %d: dead_lettered %v, want %d", round, got, round)
		}
		if got := value(fams, "babelqueue_queue_messages_dead_lettered", map[string]string{"queue": "billing"}); got != float64(round) {
			t.Errorf("round %d: billing's dead_lettered (its DLQ named billing-dead) %v, want %d", round, got, round)
		}
		if got := value(fams, "babelqueue_queue_oldest_message_age_seconds", labels); got < 59 || got > 120 {
			t.Errorf("round %d: oldest message age %v s, want about 60", round, got)
		}
	}
	s, err := queuestats.Take(ctx, tr, queuestats.Queue{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, prom.Handler())
	for name, want := range map[string]int64{
		"babelqueue_queue_messages_ready":         s.Stats.Ready,
		"babelqueue_queue_messages_in_flight":     s.Stats.InFlight,
		"babelqueue_queue_messages_delayed":       s.Stats.Delayed,
		"babelqueue_queue_messages_dead_lettered": s.DeadLettered(),
	} {
		if got := value(fams, name, labels); got != float64(want) {
			t.Errorf("%s = %v, queuestats.Take counts %d", name, got, want)
		}
	}
	// Emptied, the age is 0, not gone.
	c, err := tr.Consume(ctx, "orders", transport.ConsumeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for range 6 {
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	qc.Collect(ctx)
	fams = scrape(t, prom.Handler())
	if got := value(fams, "babelqueue_queue_oldest_message_age_seconds", labels); got != 0 {
		t.Errorf("empty queue: oldest message age %v, want 0", got)
	}
}

// statter is a transport whose counts the test sets, or fails.
type statter struct {
	transport.Transport
	mu    sync.Mutex
	stats map[string]transport.QueueStats
	err   error
}

func (s *statter) QueueStats(_ context.Context, q string) (transport.QueueStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return transport.QueueStats{}, s.err
	}
	return s.stats[q], nil
}

func (s *statter) set(q string, st transport.QueueStats, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats[q], s.err = st, err
}

// A count the broker cannot tell is not reported; partitions are reported with their
// lag and age; a broker that fails takes the queue's gauges away and counts the error,
// and they come back with it.
func TestQueueCollectorUnknownsPartitionsAndFailures(t *testing.T) {
	ctx := context.Background()
	tr := &statter{Transport: memory.New(), stats: map[string]transport.QueueStats{}}
	prom, qc := newCollector(t, tr, []queuestats.Queue{{Name: "events"}}, metrics.WithAttributes(attribute.String("broker", "kafka://k1")))
	now := time.Now()
	tr.set("events", transport.QueueStats{Exists: true, Ready: 7, InFlight: transport.UnknownCount, Delayed: transport.UnknownCount,
		Appended: 100, Oldest: now.Add(-30 * time.Second), Partitions: []transport.PartitionStats{
			{Partition: 0, Lag: 7, Oldest: now.Add(-30 * time.Second)},
			{Partition: 1, Lag: 0},
		}}, nil)
	qc.Collect(ctx)
	fams := scrape(t, prom.Handler())
	ev := map[string]string{"queue": "events", "broker": "kafka://k1"}
	for _, name := range []string{"babelqueue_queue_messages_in_flight", "babelqueue_queue_messages_delayed"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s is reported where the broker cannot tell it", name)
		}
	}
	if got := value(fams, "babelqueue_queue_messages_appended_total", ev); got != 100 {
		t.Errorf("appended_total %v, want 100", got)
	}
	if got := value(fams, "babelqueue_queue_partition_lag", map[string]string{"queue": "events", "partition": "0", "broker": "kafka://k1"}); got != 7 {
		t.Errorf("partition 0 lag %v, want 7", got)
	}
	if got := value(fams, "babelqueue_queue_partition_lag", map[string]string{"queue": "events", "partition": "1"}); got != 0 {
		t.Errorf("partition 1 lag %v, want 0", got)
	}
	if got := value(fams, "babelqueue_queue_partition_lag_seconds", map[string]string{"partition": "0"}); got < 29 || got > 60 {
		t.Errorf("partition 0 lag age %v s, want about 30", got)
	}
	if got := value(fams, "babelqueue_queue_partition_lag_seconds", map[string]string{"partition": "1"}); got != 0 {
		t.Errorf("partition 1 (no lag) lag age %v s, want 0", got)
	}

	tr.set("events", transport.QueueStats{}, errors.New("broker away"))
	qc.Collect(ctx)
	qc.Collect(ctx)
	fams = scrape(t, prom.Handler())
	if _, ok := fams["babelqueue_queue_messages_ready"]; ok {
		t.Error("the last counts are still reported after the broker stopped answering")
	}
	if got := value(fams, "babelqueue_queue_stats_errors_total", ev); got != 2 {
		t.Errorf("stats_errors_total %v after two failed rounds, want 2", got)
	}
	tr.set("events", transport.QueueStats{Exists: true, Ready: 3, Oldest: now}, nil)
	qc.Collect(ctx)
	if got := value(scrape(t, prom.Handler()), "babelqueue_queue_messages_ready", ev); got != 3 {
		t.Errorf("ready %v after the broker answered again, want 3", got)
	}
}

// Run counts on its interval until its context ends.
func TestQueueCollectorRun(t *testing.T) {
	tr := memory.New()
	prom, qc := newCollector(t, tr, []queuestats.Queue{{Name: "orders"}}, metrics.WithInterval(10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- qc.Run(ctx) }()
	if err := tr.Publish(ctx, envelopeAt(t, "orders", time.Now())); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for value(scrape(t, prom.Handler()), "babelqueue_queue_messages_ready", map[string]string{"queue": "orders"}) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not count the message written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestNewQueueCollectorRefuses(t *testing.T) {
	tr := memory.New()
	for name, c := range map[string]struct {
		tr     transport.Transport
		queues []queuestats.Queue
	}{
		"nil transport": {nil, []queuestats.Queue{{Name: "a"}}},
		"no queue":      {tr, nil},
		"no name":       {tr, []queuestats.Queue{{DLQ: "x"}}},
		"twice":         {tr, []queuestats.Queue{{Name: "a"}, {Name: "a"}}},
	} {
		if _, err := metrics.NewQueueCollector(c.tr, c.queues); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
