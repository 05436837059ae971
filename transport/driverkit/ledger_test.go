package driverkit_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

var (
	ack     = transport.Settlement{Outcome: transport.Ack}
	rewind  = transport.Settlement{Outcome: transport.Rewind}
	errBoom = errors.New("broker unreachable")
)

func newLedger(prefetch int) *driverkit.Ledger[string] {
	return driverkit.NewLedger[string](driverkit.LedgerConfig{Broker: "test", Queue: "q", Prefetch: prefetch, Logger: slog.New(slog.DiscardHandler),
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
}

// hand acquires a slot and hands out v, failing the test when either fails.
func hand(t *testing.T, l *driverkit.Ledger[string], v string) *transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Acquire(ctx); err != nil {
		t.Fatalf("Acquire for %s: %v", v, err)
	}
	e, err := l.Hand(v)
	if err != nil {
		t.Fatalf("Hand(%s): %v", v, err)
	}
	return &transport.Delivery{Queue: "q", Handle: e}
}

// settle runs Begin, then Finish with the driver's result err.
func settle(l *driverkit.Ledger[string], d *transport.Delivery, s transport.Settlement, err error) error {
	e, berr := l.Begin(d, s)
	if berr != nil {
		return berr
	}
	return l.Finish(e, s, err)
}

func acquireWithin(l *driverkit.Ledger[string], d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.Acquire(ctx)
}

func TestAcquireNeverExceedsPrefetch(t *testing.T) {
	l := newLedger(2)
	d1 := hand(t, l, "a")
	hand(t, l, "b")
	if err := acquireWithin(l, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Acquire with prefetch 2 = %v, want it to wait until ctx ends", err)
	}
	got := make(chan error, 1)
	go func() { got <- acquireWithin(l, 5*time.Second) }()
	if err := settle(l, d1, ack, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after a settle freed a slot: %v", err)
	}
	if l.Held() != 1 || l.Room() != 0 {
		t.Fatalf("Held=%d Room=%d, want 1 and 0 (one held, one acquired)", l.Held(), l.Room())
	}
	l.Unacquire()
	if l.Room() != 1 {
		t.Fatalf("Room after Unacquire = %d, want 1", l.Room())
	}
}

func TestFailedAckKeepsTheSlotUntilRewound(t *testing.T) {
	l := newLedger(1)
	d := hand(t, l, "a")
	swe := &transport.SettleWriteError{Queue: "q.dlq", Err: errBoom}
	if err := settle(l, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: "q.dlq"}}}, swe); !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Finish returned %v, want the driver's error", err)
	}
	if l.Held() != 1 {
		t.Fatalf("after a failed Ack Held = %d, want 1 (the delivery is open for a Rewind)", l.Held())
	}
	if err := settle(l, d, rewind, nil); err != nil {
		t.Fatalf("Rewind after a failed Ack: %v", err)
	}
	if l.Held() != 0 {
		t.Fatalf("after the Rewind Held = %d, want 0", l.Held())
	}
}

// The Redis outage of issue 16: the Ack fails, then the Rewind fails too. The slot
// must be free afterwards, or prefetch = concurrency such failures stop the consumer.
func TestFailedRewindStillFreesTheSlot(t *testing.T) {
	l := newLedger(2)
	for round := range 5 {
		d1, d2 := hand(t, l, "a"), hand(t, l, "b")
		for _, d := range []*transport.Delivery{d1, d2} {
			if err := settle(l, d, ack, errBoom); !errors.Is(err, errBoom) {
				t.Fatalf("round %d: Ack = %v", round, err)
			}
			if err := settle(l, d, rewind, errBoom); !errors.Is(err, errBoom) {
				t.Fatalf("round %d: Rewind = %v", round, err)
			}
			if err := settle(l, d, rewind, nil); !errors.Is(err, transport.ErrAlreadySettled) {
				t.Fatalf("round %d: a third Settle after the failed Rewind = %v, want ErrAlreadySettled", round, err)
			}
		}
		if l.Held() != 0 {
			t.Fatalf("round %d: Held = %d after every Rewind failed, want 0", round, l.Held())
		}
	}
}

func TestFailedHandOffFreesTheSlot(t *testing.T) {
	l := driverkit.NewLedger[string](driverkit.LedgerConfig{Broker: "test", Prefetch: 1, Outcomes: []transport.Outcome{transport.Ack, transport.Rewind, transport.HandOff}, Logger: slog.New(slog.DiscardHandler)})
	d := hand(t, l, "a")
	if err := settle(l, d, transport.Settlement{Outcome: transport.HandOff}, errBoom); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if l.Held() != 0 {
		t.Fatalf("Held = %d after a failed HandOff, want 0", l.Held())
	}
}

func TestSettleOnce(t *testing.T) {
	l := newLedger(4)
	d := hand(t, l, "a")
	if err := settle(l, d, ack, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []transport.Settlement{ack, rewind} {
		if err := settle(l, d, s, nil); !errors.Is(err, transport.ErrAlreadySettled) {
			t.Errorf("second Settle(%s) = %v, want ErrAlreadySettled", s.Outcome, err)
		}
	}
	if l.Held() != 0 {
		t.Fatalf("Held = %d, want 0", l.Held())
	}
}

func TestConcurrentSettlesOneWins(t *testing.T) {
	l := newLedger(1)
	d := hand(t, l, "a")
	var wins, already atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			switch err := settle(l, d, ack, nil); {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, transport.ErrAlreadySettled):
				already.Add(1)
			default:
				t.Errorf("Settle: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || already.Load() != 15 {
		t.Fatalf("16 racing Settles: %d succeeded, %d already settled; want 1 and 15", wins.Load(), already.Load())
	}
	if l.Room() != 1 {
		t.Fatalf("Room = %d, want the one slot back exactly once", l.Room())
	}
}

func TestSettleWhileSettlingIsAlreadySettled(t *testing.T) {
	l := newLedger(1)
	d := hand(t, l, "a")
	e, err := l.Begin(d, ack)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(d, rewind); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Begin during a Settle = %v, want ErrAlreadySettled", err)
	}
	if err := l.Finish(e, ack, nil); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	l := newLedger(8)
	cases := []struct {
		name string
		s    transport.Settlement
		want error
	}{
		{"handoff not offered", transport.Settlement{Outcome: transport.HandOff}, transport.ErrUnsupported},
		{"unknown outcome", transport.Settlement{Outcome: transport.Outcome(42)}, transport.ErrUnsupported},
		{"writes with rewind", transport.Settlement{Outcome: transport.Rewind, Writes: []*transport.Message{{Queue: "x"}}}, transport.ErrBadSettlement},
		{"nil write", transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{nil}}, transport.ErrBadSettlement},
		{"write without queue", transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Body: []byte("x")}}}, transport.ErrBadSettlement},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := hand(t, l, c.name)
			if _, err := l.Begin(d, c.s); !errors.Is(err, c.want) {
				t.Fatalf("Begin = %v, want %v", err, c.want)
			}
			// A refused settlement leaves the delivery open.
			if err := settle(l, d, ack, nil); err != nil {
				t.Fatalf("Ack after a refused settlement: %v", err)
			}
		})
	}
	if err := driverkit.Validate("x", transport.Settlement{Outcome: transport.HandOff}, transport.Ack, transport.HandOff); err != nil {
		t.Fatalf("HandOff where offered: %v", err)
	}
}

func TestForeignDelivery(t *testing.T) {
	l, other := newLedger(1), newLedger(1)
	d := hand(t, other, "a")
	for _, d := range []*transport.Delivery{nil, {}, {Handle: "x"}, d} {
		if _, err := l.Begin(d, ack); !errors.Is(err, driverkit.ErrForeign) {
			t.Errorf("Begin(%v) = %v, want ErrForeign", d, err)
		}
	}
}

func TestCloseGivesBackOpenEntries(t *testing.T) {
	l := newLedger(4)
	d1 := hand(t, l, "first")
	d2 := hand(t, l, "second")
	d3 := hand(t, l, "third")
	if err := settle(l, d2, ack, nil); err != nil {
		t.Fatal(err)
	}
	busy, err := l.Begin(d3, ack)
	if err != nil {
		t.Fatal(err)
	}
	back := l.Close()
	if len(back) != 1 || back[0] != "first" {
		t.Fatalf("Close gave back %q, want [first] (second settled, third settling)", back)
	}
	if again := l.Close(); again != nil {
		t.Fatalf("second Close gave back %q", again)
	}
	err = settle(l, d1, ack, nil)
	if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Settle after Close = %v, want ErrClosed and ErrAlreadySettled", err)
	}
	// The settle in progress at Close fails: it is not reopened on a closed driverkit.
	if err := l.Finish(busy, ack, errBoom); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if l.Held() != 0 {
		t.Fatalf("Held after Close = %d, want 0", l.Held())
	}
	if err := acquireWithin(l, time.Second); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
}

func TestCloseWakesAcquire(t *testing.T) {
	l := newLedger(1)
	hand(t, l, "a")
	got := make(chan error, 1)
	go func() { got <- acquireWithin(l, 10*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	select {
	case err := <-got:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("waiting Acquire = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake a waiting Acquire")
	}
}

func TestHandAfterCloseFreesTheSlot(t *testing.T) {
	l := newLedger(1)
	if err := acquireWithin(l, time.Second); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := l.Hand("late"); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Hand after Close = %v, want ErrClosed", err)
	}
	if _, err := l.Add("late"); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Add after Close = %v, want ErrClosed", err)
	}
}

func TestTakeBack(t *testing.T) {
	l := newLedger(1)
	d := hand(t, l, "a")
	e := d.Handle.(*driverkit.Entry[string])
	cause := &transport.TakenBackError{Broker: "test", Queue: "q", Reason: "the partition was revoked"}
	l.TakeBack(e, cause)
	if l.Held() != 0 {
		t.Fatalf("Held after TakeBack = %d, want 0", l.Held())
	}
	err := settle(l, d, ack, nil)
	if !errors.Is(err, transport.ErrTakenBack) || !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Settle after TakeBack = %v, want ErrTakenBack and ErrAlreadySettled", err)
	}
	if open := l.Open(nil); len(open) != 0 {
		t.Fatalf("Open after TakeBack = %d entries", len(open))
	}
}

func TestTakenBackErrorFromTheDriverFreesTheSlot(t *testing.T) {
	l := newLedger(1)
	d := hand(t, l, "a")
	lost := errors.New("reservation lapsed")
	err := settle(l, d, ack, &transport.TakenBackError{Broker: "test", Queue: "q", Reason: "the reservation lapsed", Err: lost})
	if !errors.Is(err, lost) || !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Finish = %v", err)
	}
	if l.Held() != 0 {
		t.Fatalf("Held = %d after a taken-back Ack, want 0", l.Held())
	}
	// A taken-back delivery is not a failing broker: no backoff.
	if err := acquireWithin(l, 20*time.Millisecond); err != nil {
		t.Fatalf("Acquire right after a taken-back Ack: %v", err)
	}
}

func TestWithdraw(t *testing.T) {
	l := newLedger(1)
	e, err := l.Add("a")
	if err != nil {
		t.Fatal(err)
	}
	if l.Room() != 0 {
		t.Fatalf("Room = %d, want 0", l.Room())
	}
	if !l.Withdraw(e) {
		t.Fatal("Withdraw of an open entry = false")
	}
	if l.Withdraw(e) {
		t.Fatal("second Withdraw = true")
	}
	if l.Room() != 1 {
		t.Fatalf("Room after Withdraw = %d, want 1", l.Room())
	}
}

func TestOpenFilters(t *testing.T) {
	l := newLedger(3)
	hand(t, l, "p0-a")
	d := hand(t, l, "p1-b")
	hand(t, l, "p0-c")
	if _, err := l.Begin(d, ack); err != nil {
		t.Fatal(err)
	}
	open := l.Open(func(v string) bool { return strings.HasPrefix(v, "p0") })
	if len(open) != 2 || open[0].Value != "p0-a" || open[1].Value != "p0-c" {
		t.Fatalf("Open(p0) = %v", open)
	}
	if n := len(l.Open(nil)); n != 2 {
		t.Fatalf("Open(nil) = %d entries, want 2 (one is settling)", n)
	}
}

// Failed settlements slow receiving down, are logged with their cause (not once per
// message), and a success ends the backoff.
func TestFailingSettlesBackOffAndLog(t *testing.T) {
	logs := &transporttest.LogBuffer{}
	const maxBackoff = 400 * time.Millisecond
	l := driverkit.NewLedger[string](driverkit.LedgerConfig{Broker: "test", Queue: "q", Prefetch: 1, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: maxBackoff})
	var lastWait time.Duration
	for i := range 8 {
		start := time.Now()
		d := hand(t, l, "a")
		lastWait = time.Since(start)
		if err := settle(l, d, ack, errBoom); err == nil {
			t.Fatal("Finish swallowed the error")
		}
		if err := settle(l, d, rewind, errBoom); err == nil {
			t.Fatal("Finish swallowed the error")
		}
		if i == 0 && lastWait > 50*time.Millisecond {
			t.Fatalf("the first Acquire waited %s", lastWait)
		}
	}
	// The 8th Acquire waited for the backoff of the 14th failure in a row (10ms<<13,
	// capped).
	if lastWait < maxBackoff/2 {
		t.Fatalf("Acquire after 14 failures in a row waited %s, want about %s", lastWait, maxBackoff)
	}
	out := logs.String()
	if n := strings.Count(out, "settle failed"); n != 5 { // failures 1, 2, 4, 8, 16
		t.Fatalf("logged %d settle-failure lines for 16 failures, want 5:\n%s", n, out)
	}
	if !strings.Contains(out, "broker unreachable") || !strings.Contains(out, "queue=q") {
		t.Fatalf("the log does not name the cause and the queue:\n%s", out)
	}
	// A success ends the backoff at once.
	time.Sleep(maxBackoff)
	d := hand(t, l, "b")
	if err := settle(l, d, ack, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "settling again") {
		t.Fatalf("recovery not logged:\n%s", logs.String())
	}
	if err := acquireWithin(l, 20*time.Millisecond); err != nil {
		t.Fatalf("Acquire after a successful settle still backs off: %v", err)
	}
}

func TestPauseWaitsForTheBackoffOnly(t *testing.T) {
	l := driverkit.NewLedger[string](driverkit.LedgerConfig{Broker: "test", Prefetch: 1, Logger: slog.New(slog.DiscardHandler), MinBackoff: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	hand(t, l, "held")
	if err := l.Pause(ctx); err != nil {
		t.Fatalf("Pause with no failure and no free slot: %v (Pause does not wait for slots)", err)
	}
	e, err := l.Add("b")
	if err != nil {
		t.Fatal(err)
	}
	s := transport.Settlement{Outcome: transport.Rewind}
	if _, err := l.Begin(&transport.Delivery{Handle: e}, s); err != nil {
		t.Fatal(err)
	}
	_ = l.Finish(e, s, errBoom)
	if err := l.Pause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pause right after a failure = %v, want it to wait past a 20ms deadline", err)
	}
}

func TestSendAll(t *testing.T) {
	ws := []*transport.Message{{Queue: "a"}, {Queue: "b"}, {Queue: "c"}}
	var sent []string
	err := driverkit.SendAll(context.Background(), ws, func(_ context.Context, m *transport.Message) error {
		if m.Queue == "b" {
			return errBoom
		}
		sent = append(sent, m.Queue)
		return nil
	})
	var swe *transport.SettleWriteError
	if !errors.As(err, &swe) || swe.Queue != "b" || !errors.Is(err, errBoom) {
		t.Fatalf("SendAll = %v, want a SettleWriteError for b wrapping the cause", err)
	}
	if strings.Join(sent, ",") != "a" {
		t.Fatalf("sent %v, want [a]: writes stop at the first failure", sent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err = driverkit.SendAll(ctx, ws, func(context.Context, *transport.Message) error { calls++; return nil })
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, context.Canceled) || calls != 0 {
		t.Fatalf("SendAll with an ended ctx = %v after %d calls, want a settle-write error and no call", err, calls)
	}
}

func TestReceiveFreesTheSlotWhenTheBrokerFails(t *testing.T) {
	l := newLedger(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range 3 {
		if _, err := l.Receive(ctx, func(context.Context) (*transport.Delivery, error) { return nil, errBoom }); !errors.Is(err, errBoom) {
			t.Fatalf("Receive = %v, want the broker's error", err)
		}
	}
	d, err := l.Receive(ctx, func(context.Context) (*transport.Delivery, error) {
		e, err := l.Hand("a")
		return &transport.Delivery{Handle: e}, err
	})
	if err != nil || l.Held() != 1 {
		t.Fatalf("Receive after three failed ones: %v, held %d; want a delivery in the one slot", err, l.Held())
	}
	short, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, err := l.Receive(short, func(context.Context) (*transport.Delivery, error) {
		t.Fatal("receive called without a free slot")
		return nil, nil
	}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive with the slot taken = %v, want it to wait", err)
	}
	if err := settle(l, d, ack, nil); err != nil {
		t.Fatal(err)
	}
}

// A driver that keeps the entry beside its delivery (one allocation) gets the same
// account as with Hand: the entry settles once, Close gives it back in hand-out order
// with the others, and after Close HandInto frees the slot it was given.
func TestHandIntoKeepsTheSameAccount(t *testing.T) {
	l := newLedger(3)
	type delivery struct {
		d transport.Delivery
		e driverkit.Entry[string]
	}
	handInto := func(v string) *transport.Delivery {
		t.Helper()
		if err := acquireWithin(l, time.Second); err != nil {
			t.Fatal(err)
		}
		h := new(delivery)
		if err := l.HandInto(&h.e, v); err != nil {
			t.Fatalf("HandInto(%s): %v", v, err)
		}
		h.d = transport.Delivery{Queue: "q", Handle: &h.e}
		return &h.d
	}
	a := handInto("a")
	hand(t, l, "b")
	handInto("c")
	if err := settle(l, a, ack, nil); err != nil {
		t.Fatalf("settle a: %v", err)
	}
	if err := settle(l, a, ack, nil); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("second settle of a = %v, want ErrAlreadySettled", err)
	}
	if got := l.Close(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Close gave back %v, want [b c]", got)
	}

	l = newLedger(1)
	if err := acquireWithin(l, time.Second); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := l.HandInto(new(driverkit.Entry[string]), "late"); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("HandInto after Close = %v, want ErrClosed", err)
	}
	if l.Room() != 1 {
		t.Fatalf("Room after a refused HandInto = %d, want 1 (the slot freed)", l.Room())
	}
}
