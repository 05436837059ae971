package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPipelinedSettleWriteFailureRewinds: a pipelined settle write (the default) that
// fails does not hold up Settle, which returns nil once the write is handed to the
// producer, but it commits nothing either: the transport rewinds the record itself, it
// is delivered again, and once the write can succeed the record is settled and committed
// and its write is on the topic once.
func TestPipelinedSettleWriteFailureRewinds(t *testing.T) {
	t.Parallel()
	tr := openKafka(t, "auto_create_topics", "false", "delivery_timeout", "2s")
	q := newTopic(t, "bqtest-pipe")
	dlq := q + ".dlq"
	createTopic(t, q, 1)
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"n":1}`), Key: []byte("k")})
	var failed transporttest.SettleFailures
	c, err := tr.Consume(context.Background(), q, transport.ConsumeOptions{Prefetch: 4, SettleFailed: failed.Record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	dl := func(d *transport.Delivery) transport.Settlement {
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: d.Body, Key: d.Key}}}
	}
	d := transporttest.Receive(t, c, 30*time.Second)
	first := d
	settleOK(t, c, d, dl(d)) // handed to the producer; the topic is missing
	d = transporttest.Receive(t, c, 30*time.Second)
	if got := failed.Expect(t, 1, 10*time.Second); got[0].Delivery != first || got[0].Settlement.Writes[0].Queue != dlq {
		t.Errorf("SettleFailed reported %+v, want the first delivery and its write to %s", got[0], dlq)
	}
	if string(d.Body) != `{"n":1}` || string(d.Key) != "k" {
		t.Fatalf("after the failed write the consumer handed out %q (key %q), want the same record", d.Body, d.Key)
	}
	if topicExists(t, dlq) {
		t.Fatal("the failed write created the topic with auto-creation off")
	}
	createTopic(t, dlq, 1)
	settleOK(t, c, d, dl(d))
	// The write is confirmed in the background; the record is committed then, and only
	// then: a new member of the group finds nothing once the first has closed.
	if vs := topicValues(t, dlq, 3*time.Second); len(vs) != 1 {
		t.Fatalf("%s holds %d records, want the one write", dlq, len(vs))
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c2 := consumeOn(t, tr, q, 1)
	transporttest.ExpectNothing(t, c2, 5*time.Second)
	if got := failed.Got(); len(got) != 1 {
		t.Errorf("SettleFailed was called %d times, want once (the confirmed write is no failure)", len(got))
	}
}

// TestPipelinedSettleWritesWaitForRoom: a pipelined settle write that finds the
// producer's buffer full (here it holds one record) is handed over again once there is
// room: every write reaches its topic once, every record is committed, and nothing is
// delivered again.
func TestPipelinedSettleWritesWaitForRoom(t *testing.T) {
	t.Parallel()
	const n = 60
	q := newTopic(t, "bqtest-room")
	dlq := q + ".dlq"
	createTopic(t, q, 1)
	createTopic(t, dlq, 1)
	prod := rawClient(t, kgo.MaxBufferedRecords(1))
	tr, err := kafka.New(prod, kafka.Factory(kgo.SeedBrokers(seeds(t)...)), kafka.WithGroup(transporttest.UniqueName("bqtest-room")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	for i := range n {
		publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(strconv.Itoa(i))})
	}
	c := consumeOn(t, tr, q, n)
	ds := make([]*transport.Delivery, n)
	for i := range ds {
		ds[i] = transporttest.Receive(t, c, 30*time.Second)
	}
	// Settled from eight goroutines at once, so most writes find the one-record buffer
	// taken.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				d := ds[i]
				s := transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: d.Body}}}
				if err := c.Settle(context.Background(), d, s); err != nil {
					errs <- fmt.Errorf("Settle(%s): %w", d.Body, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := make([]string, n)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	got := topicValues(t, dlq, 3*time.Second)
	slices.SortFunc(got, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	if !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want each of the %d writes once", dlq, got, n)
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	transporttest.ExpectNothing(t, consumeOn(t, tr, q, 1), 5*time.Second)
}
