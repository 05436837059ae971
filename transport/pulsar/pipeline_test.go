package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// refusingTopic returns a topic whose maxMessageSize policy (64 bytes) makes the broker
// refuse a write of big, once the policy has reached the broker; the policy is removed
// with the test.
func refusingTopic(t *testing.T, tr transport.Transport, big []byte) string {
	t.Helper()
	q := transporttest.UniqueName("bqtest-refusing")
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	topicMaxMessageSize(t, q, "64")
	t.Cleanup(func() { topicMaxMessageSize(t, q, "") })
	// Topic policies reach the broker asynchronously: write until one is refused.
	for range 40 {
		if tr.Publish(ctx, &transport.Message{Queue: q, Body: big}) != nil {
			return q
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatal("the broker never refused a write over the topic's maxMessageSize")
	return ""
}

// Pipelined (the default), a settle write the broker refuses does not hold up Settle,
// which returns nil once the writes are handed over, and acknowledges nothing: the
// transport rewinds the delivery itself, and it comes back. The write confirmed beside
// the refused one stays made; the message is not lost.
func TestPipelinedRefusedSettleWriteRewinds(t *testing.T) {
	tr := openTransport(t, "send_timeout=5s", fastNack(), pulsar.WithPipelinedSettles(true))
	big := body("refused-" + strings.Repeat("x", 200))
	dlq := refusingTopic(t, tr, big)
	q, ok := transporttest.UniqueName("bqtest-src"), transporttest.UniqueName("bqtest-ok")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := body("pipelined-refused")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: src}); err != nil {
		t.Fatal(err)
	}
	var failed transporttest.SettleFailures
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1, SettleFailed: failed.Record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	d := receive(t, c)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: ok, Body: src},
		{Queue: dlq, Body: big},
	}})
	if err != nil {
		t.Fatalf("pipelined Settle = %v, want nil (the outcome comes later)", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("a second Settle = %v, want ErrAlreadySettled", err)
	}
	again := receive(t, c)
	if !bytes.Equal(again.Body, src) || again.Redeliveries < 1 {
		t.Fatalf("after a refused write the delivery came back as %q with redelivery count %d, want the message, redelivered", again.Body, again.Redeliveries)
	}
	if got := failed.Expect(t, 1, 10*time.Second); got[0].Delivery != d || len(got[0].Settlement.Writes) != 2 {
		t.Errorf("SettleFailed reported %+v, want the first delivery and its two writes", got[0])
	}
	if err := c.Settle(ctx, again, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	if got := transporttest.DrainBodies(t, tr, ok, 100, 3*time.Second); got[string(src)] != 1 || len(got) != 1 {
		t.Fatalf("%s holds %v, want the confirmed write once", ok, got)
	}
}

// A Transactional consumer (a DLQ redrive) never pipelines: its Settle waits for the
// writes and returns the refused one as a SettleWriteError, acknowledging nothing.
func TestTransactionalConsumerDoesNotPipeline(t *testing.T) {
	tr := openTransport(t, "send_timeout=5s", fastNack(), pulsar.WithPipelinedSettles(true))
	big := body("refused-" + strings.Repeat("x", 200))
	dlq := refusingTopic(t, tr, big)
	q := transporttest.UniqueName("bqtest-tx")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := body("transactional")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: src}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	d := receive(t, c)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: big}}})
	if !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Settle of a Transactional consumer with a refused write = %v, want ErrSettleWrite", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after the failed Ack: %v", err)
	}
	if again := receive(t, c); !bytes.Equal(again.Body, src) {
		t.Fatalf("after the failed Ack the queue handed out %q, want the message back", again.Body)
	}
}

// Closing a consumer, then the transport, waits for the pipelined settlements in
// flight: every delivery is acknowledged once its write is confirmed, so each message
// ends on the retry topic exactly once and none is left on the source topic.
func TestPipelinedCloseWaitsForWrites(t *testing.T) {
	const n = 200
	direct := openTransport(t, "", fastNack())
	tr := openTransport(t, "", fastNack(), pulsar.WithPipelinedSettles(true))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, retry := transporttest.UniqueName("bqtest-close"), transporttest.UniqueName("bqtest-close-retry")
	msgs := make([]*transport.Message, n)
	for i := range n {
		msgs[i] = &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	if err := direct.PublishConfirmed(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 20})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		d := receive(t, c)
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: retry, Body: d.Body}}}); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("consumer Close: %v", err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatalf("transport Close: %v", err)
	}
	written := transporttest.DrainBodies(t, direct, retry, 100, 3*time.Second)
	for i := range n {
		if b := fmt.Sprintf(`{"n":%d}`, i); written[b] != 1 {
			t.Errorf("%s is on the retry topic %d times, want once", b, written[b])
		}
	}
	if back := transporttest.DrainBodies(t, direct, q, 100, 3*time.Second); len(back) != 0 {
		t.Errorf("%d messages were left on the source topic after Close: %v", len(back), back)
	}
}

// The runtime's shutdown waits for the pipelined dead-letter writes: every message of
// a handler that always fails (max_attempts 1, dead-lettering on) ends on the
// dead-letter topic exactly once, and none is left on the source topic.
func TestRuntimeShutdownWaitsForPipelinedWrites(t *testing.T) {
	const n = 200
	q := transporttest.UniqueName("bqtest-shutdown")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := babelqueue.Open(ctx, brokerURL(t)+"?pipeline_settles=1&nack_delay=200ms", babelqueue.WithQueue(q),
		babelqueue.WithLogger(quietLogger()), babelqueue.WithMaxAttempts(1), babelqueue.WithDeadLetter(true),
		babelqueue.WithConcurrency(8), babelqueue.WithPrefetch(40))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	var calls atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	entries := make([]babelqueue.BatchEntry, n)
	for i := range n {
		entries[i] = babelqueue.BatchEntry{URN: "urn:babel:orders:created", Data: map[string]int{"n": i}}
	}
	if _, err := a.PublishBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	// Stopped as soon as the last message was handled, with the last dead-letter
	// writes still in flight.
	runUntil(t, a, "every message handled", func() bool { return calls.Load() >= n })
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	direct := openTransport(t, "", fastNack())
	dead := transporttest.DrainBodies(t, direct, q+".dlq", 100, 3*time.Second)
	total := 0
	for b, k := range dead {
		total += k
		if k != 1 {
			t.Errorf("%s is on the dead-letter topic %d times, want once", b, k)
		}
	}
	if total != n {
		t.Errorf("the dead-letter topic holds %d messages, want %d", total, n)
	}
	if back := transporttest.DrainBodies(t, direct, q, 100, 3*time.Second); len(back) != 0 {
		t.Errorf("%d messages were left on the source topic after shutdown", len(back))
	}
	if int(calls.Load()) != n {
		t.Errorf("the handler ran %d times, want %d (once per message)", calls.Load(), n)
	}
}

// pipeline_settles=0 keeps the synchronous settle: a refused write fails Settle with a
// SettleWriteError, and acknowledges nothing.
func TestNotPipelinedSettleReturnsWriteFailure(t *testing.T) {
	tr := openTransport(t, "send_timeout=5s&pipeline_settles=0", fastNack())
	big := body("refused-" + strings.Repeat("x", 200))
	dlq := refusingTopic(t, tr, big)
	q := transporttest.UniqueName("bqtest-sync")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := body("not-pipelined")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: src}); err != nil {
		t.Fatal(err)
	}
	c := consumeOn(t, tr, q, 1)
	d := receive(t, c)
	err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: big}}})
	if !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Settle with pipeline_settles=0 and a refused write = %v, want ErrSettleWrite", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after the failed Ack: %v", err)
	}
	if again := receive(t, c); !bytes.Equal(again.Body, src) {
		t.Fatalf("after the failed Ack the queue handed out %q, want the message back", again.Body)
	}
}
