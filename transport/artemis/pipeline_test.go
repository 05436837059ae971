package artemis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// Pipelined (the default), a settle write Artemis refuses does not hold up Settle,
// which returns nil once the writes are sent, and acknowledges nothing: the transport
// gives the delivery back itself, without counting it against max-delivery-attempts,
// and it comes back. The write accepted before the refused one stays made.
func TestPipelinedRefusedSettleWriteGivesBack(t *testing.T) {
	tr, q, ok, dlq, body := refusingRig(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var failed transporttest.SettleFailures
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1, SettleFailed: failed.Record})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	d := transporttest.Receive(t, c, 30*time.Second)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: ok, Body: body},
		{Queue: dlq, Body: body},
	}})
	if err != nil {
		t.Fatalf("pipelined Settle = %v, want nil (the outcome comes later)", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("a second Settle = %v, want ErrAlreadySettled", err)
	}
	again := transporttest.Receive(t, c, 30*time.Second)
	if !bytes.Equal(again.Body, body) || again.Redeliveries != 0 {
		t.Fatalf("after a refused write the delivery came back as %q with delivery-count %d, want the body with 0", again.Body, again.Redeliveries)
	}
	if got := failed.Expect(t, 1, 10*time.Second); got[0].Delivery != d || len(got[0].Settlement.Writes) != 2 {
		t.Errorf("SettleFailed reported %+v, want the first delivery and its two writes", got[0])
	}
	if err := c.Settle(ctx, again, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	if got := transporttest.DrainBodies(t, tr, ok, 50, 2*time.Second); got[string(body)] != 1 || len(got) != 1 {
		t.Fatalf("%s holds %v, want the accepted write once", ok, got)
	}
	if got := failed.Got(); len(got) != 1 {
		t.Errorf("SettleFailed was called %d times, want once", len(got))
	}
}

// Pipelined settle writes in flight when the connection is cut lose nothing: every
// message either has its write on the retry queue or is delivered again (or both: a
// duplicate, never a loss), and none is accepted without its write.
func TestPipelinedSettleCutMidFlight(t *testing.T) {
	const n = 40
	direct := openTransport(t)
	proxied, cut := transporttest.ProxyURL(t, brokerURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, err := artemis.Open(ctx, proxied, artemis.WithLogger(quiet()), artemis.WithPipelinedSettles(true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	q, retry := transporttest.UniqueName("bqtest-cut"), transporttest.UniqueName("bqtest-cut-retry")
	for i := range n {
		if err := direct.Publish(ctx, &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: n})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		d := transporttest.Receive(t, c, 30*time.Second)
		err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: retry, Body: d.Body}}})
		if err != nil && !errors.Is(err, transport.ErrSettleWrite) {
			t.Fatalf("Settle: %v", err)
		}
	}
	restore := cut() // the outcomes of most writes are still on their way
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	_ = c.Close(cctx)
	ccancel()
	restore()

	written := transporttest.DrainBodies(t, direct, retry, 50, 3*time.Second)
	back := transporttest.DrainBodies(t, direct, q, 50, 3*time.Second)
	lost := 0
	for i := range n {
		b := fmt.Sprintf(`{"n":%d}`, i)
		if written[b] == 0 && back[b] == 0 {
			lost++
			t.Errorf("%s was neither written to the retry queue nor delivered again", b)
		}
		if written[b] > 1 {
			t.Errorf("%s written %d times by one settle", b, written[b])
		}
	}
	t.Logf("%d messages: %d written, %d delivered again, %d lost", n, len(written), len(back), lost)
}
