package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
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

// Pipelined, a consumer hands out no more deliveries whose settlement the broker has not
// answered than its prefetch and the pipeline's depth (max(256, prefetch)): what a
// SIGKILL or a lost connection then redelivers, settle writes made and acknowledgements
// lost, so the bound of a fault's duplicates (docs/reliability.md, which the fault
// suite asserts). With pulsar-client-go's answer to a refused write (none until
// send_timeout) every settle write here stays unanswered; a pipeline without a bound
// would take every message of the queue.
func TestPipelineBoundsUnansweredSettlements(t *testing.T) {
	tr := openTransport(t, "send_timeout=15s", fastNack(), pulsar.WithPipelinedSettles(true))
	big := body("refused-" + strings.Repeat("x", 200))
	dlq := refusingTopic(t, tr, big)
	q := transporttest.UniqueName("bqtest-depth")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefetch, depth = 2, driverkit.DefaultPipelineDepth
	const messages = prefetch + depth + 40
	for i := range messages {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body(fmt.Sprintf("depth-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	handed, pipelined := 0, 0
	for range messages {
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		d, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			break // nothing handed out while the pipeline is full
		}
		handed++
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.Settle(sctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: big}}})
		scancel()
		if err != nil {
			break // Settle waited for room in the pipeline
		}
		pipelined++
	}
	t.Logf("handed out %d of %d, %d settled into the pipeline", handed, messages, pipelined)
	if handed > prefetch+depth || pipelined > depth {
		t.Errorf("handed out %d deliveries and pipelined %d settlements the broker never answered: want at most %d and %d",
			handed, pipelined, prefetch+depth, depth)
	}
	if pipelined < depth {
		t.Errorf("%d settlements went into the pipeline before it was full, want %d: the test does not reach the bound", pipelined, depth)
	}
}
