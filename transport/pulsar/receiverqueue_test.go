package pulsar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The receiver queue is the consumer's own (receiver_queue, default 1000), not the
// prefetch: with a prefetch of 1 the broker still dispatches the whole backlog to the
// consumer's receiver queue, while no more than one delivery is handed out. Messages
// that waited there and were never handed out go to the next consumer with their
// redelivery count unchanged when the consumer closes, so they do not use up attempts.
func TestReceiverQueueIndependentOfPrefetch(t *testing.T) {
	const n = 20
	tr := openTransport(t, "", fastNack())
	q := transporttest.UniqueName("bqtest-rq")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body(fmt.Sprint("rq", i))}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, c)
	var st transport.QueueStats
	for st.InFlight != n && ctx.Err() == nil {
		if st, err = tr.QueueStats(ctx, q); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.InFlight != n {
		t.Fatalf("the broker dispatched %d of %d messages to a consumer with a prefetch of 1, want all of them in its receiver queue", st.InFlight, n)
	}
	rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if extra, err := c.Receive(rctx); err == nil {
		t.Fatalf("a second delivery (%q) was handed out beyond the prefetch of 1", extra.Body)
	}
	rcancel()
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next := consumeOn(t, openTransport(t, ""), q, n)
	for range n - 1 {
		d := receive(t, next)
		if d.Redeliveries != 0 {
			t.Errorf("%q, fetched into the closed consumer's receiver queue and never handed out, came back with redelivery count %d, want 0", d.Body, d.Redeliveries)
		}
		if err := next.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, next, time.Second)
}
