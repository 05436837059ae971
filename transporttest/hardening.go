package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
)

// The consumer-contract cases a driver opts in to, one [Config] field each (see
// [Config.BreakSettleWrites], [Config.PrefetchBound], [Config.SettleAfterClose] and
// [Config.RefusesBadSettlements]). [Run] runs each case whose field is set and logs the
// ones it leaves out, so a driver that has not adopted them yet keeps passing.
func hardeningCases(cfg Config) (run []kitCase, left []string) {
	all := []struct {
		kitCase
		on    bool
		field string
	}{
		{kitCase{"SettleWriteFailureAcksNothing", testSettleWriteFailure}, cfg.BreakSettleWrites != nil, "BreakSettleWrites"},
		{kitCase{"PrefetchBound", testPrefetchBound}, cfg.PrefetchBound, "PrefetchBound"},
		{kitCase{"SettleAfterClose", testSettleAfterClose}, cfg.SettleAfterClose, "SettleAfterClose"},
		{kitCase{"RefusesBadSettlements", testBadSettlements}, cfg.RefusesBadSettlements, "RefusesBadSettlements"},
	}
	for _, c := range all {
		if c.on {
			run = append(run, c.kitCase)
		} else {
			left = append(left, c.name+" (Config."+c.field+")")
		}
	}
	return run, left
}

type kitCase struct {
	name string
	fn   func(t *testing.T, cfg Config)
}

// testSettleWriteFailure: an Ack whose settle write fails acknowledges nothing, returns
// an error matching ErrSettleWrite (or ErrTakenBack, when the broker took the delivery
// back with the connection first), makes no write, and the delivery comes back.
func testSettleWriteFailure(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q, retry := cfg.NewQueue(t), cfg.NewQueue(t)
	m := msg(q, "settle-write-fails")
	publish(t, tr, m)
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)

	restore := cfg.BreakSettleWrites(t, tr)
	restored := false
	defer func() {
		if !restored {
			restore()
		}
	}()
	w := msg(retry, "settle-write-fails")
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ReceiveTimeout)
	err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{w}})
	cancel()
	// A driver whose consumer connection went down with the writes may find the
	// delivery taken back before it writes anything: that is no failure either.
	if !errors.Is(err, transport.ErrSettleWrite) && !errors.Is(err, transport.ErrTakenBack) {
		t.Fatalf("Ack whose settle write the broker refused = %v, want an error matching ErrSettleWrite (or ErrTakenBack)", err)
	}
	restore()
	restored = true

	// What the runtime does next: rewind. The broker may have taken the delivery back by
	// itself (a cut connection), which is no failure.
	ctx, cancel = context.WithTimeout(context.Background(), cfg.ReceiveTimeout)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind})
	cancel()
	if err != nil && !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Rewind after the failed Ack: %v", err)
	}
	got := Receive(t, c, 2*cfg.ReceiveTimeout)
	if !bytes.Equal(got.Body, m.Body) {
		t.Fatalf("after a failed settle write the queue handed out %q, want the same message back", got.Body)
	}
	settle(t, c, got, transport.Settlement{Outcome: transport.Ack})
	ExpectNothing(t, c, cfg.QuietPeriod)
	cr := consume(t, cfg, tr, retry)
	ExpectNothing(t, cr, cfg.QuietPeriod)
}

// testPrefetchBound: Receive never hands out more than the prefetch of unsettled
// deliveries, and every way of finishing one (ack, rewind) frees its slot.
func testPrefetchBound(t *testing.T, cfg Config) {
	const prefetch = 3
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	const n = prefetch + 2
	for i := range n {
		publish(t, tr, msg(q, fmt.Sprintf("bound-%d", i)))
	}
	bound := cfg
	bound.Prefetch = prefetch
	c := consume(t, bound, tr, q)
	held := make([]*transport.Delivery, 0, prefetch)
	for range prefetch {
		held = append(held, Receive(t, c, cfg.ReceiveTimeout))
	}
	// Two more messages wait, but the prefetch is taken.
	ExpectNothing(t, c, cfg.QuietPeriod)
	acked := map[string]bool{}
	ack := func(d *transport.Delivery) {
		t.Helper()
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
		acked[string(d.Body)] = true
	}
	ack(held[0])
	held = append(held[1:], Receive(t, c, cfg.ReceiveTimeout))
	ExpectNothing(t, c, cfg.QuietPeriod)
	settle(t, c, held[0], transport.Settlement{Outcome: transport.Rewind})
	held = append(held[1:], Receive(t, c, cfg.ReceiveTimeout)) // the rewound one or the last
	ExpectNothing(t, c, cfg.QuietPeriod)
	for _, d := range held {
		ack(d)
	}
	for len(acked) < n {
		ack(Receive(t, c, cfg.ReceiveTimeout))
	}
	ExpectNothing(t, c, cfg.QuietPeriod)
}

// testSettleAfterClose: a delivery still held when its consumer closes cannot be
// settled afterwards: Settle returns at once with an error matching ErrClosed or
// ErrAlreadySettled (it was given back), and the message comes back to a new consumer.
func testSettleAfterClose(t *testing.T, cfg Config) {
	closeWithHeld(t, cfg, "settle-after-close", func(ctx context.Context, c transport.Consumer, d *transport.Delivery) {
		for _, s := range []transport.Settlement{{Outcome: transport.Ack}, {Outcome: transport.Rewind}} {
			err := c.Settle(ctx, d, s)
			if err == nil || !(errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrAlreadySettled)) {
				t.Fatalf("%s after Close = %v, want an error matching ErrClosed or ErrAlreadySettled", s.Outcome, err)
			}
		}
		if _, err := c.Receive(ctx); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Receive after Close = %v, want ErrClosed", err)
		}
	})
}

// testBadSettlements: an outcome the transport does not offer is refused with
// ErrUnsupported, a malformed settlement with ErrBadSettlement; neither settles the
// delivery, which an Ack then finishes.
func testBadSettlements(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	publish(t, tr, msg(q, "bad-settlements"))
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ReceiveTimeout)
	defer cancel()
	refused := []struct {
		s    transport.Settlement
		want error
	}{
		{transport.Settlement{Outcome: transport.Outcome(99)}, transport.ErrUnsupported},
		{transport.Settlement{Outcome: transport.Rewind, Writes: []*transport.Message{msg(cfg.NewQueue(t), "x")}}, transport.ErrBadSettlement},
		{transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{nil}}, transport.ErrBadSettlement},
		{transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Body: []byte("{}")}}}, transport.ErrBadSettlement},
	}
	if !tr.Capabilities().HandOff {
		refused = append(refused, struct {
			s    transport.Settlement
			want error
		}{transport.Settlement{Outcome: transport.HandOff}, transport.ErrUnsupported})
	}
	for _, r := range refused {
		if err := c.Settle(ctx, d, r.s); !errors.Is(err, r.want) {
			t.Errorf("Settle(%s with %d writes) = %v, want %v", r.s.Outcome, len(r.s.Writes), err, r.want)
		}
	}
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	ExpectNothing(t, c, cfg.QuietPeriod)
}

// Until a driver sets a field, a note says which cases it leaves out.
func noteLeftOut(t *testing.T, left []string) {
	if len(left) > 0 {
		t.Logf("transporttest: consumer-contract cases this driver has not opted in to: %v", left)
	}
}
