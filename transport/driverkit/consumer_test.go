package driverkit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transport/driverkit/driverkittest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// logLine is one record a consumer logged.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// logs captures a logger's records.
type logs struct {
	mu    sync.Mutex
	lines []logLine
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.Any()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// with returns the lines whose message contains s.
func (l *logs) with(s string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, line := range l.lines {
		if strings.Contains(line.msg, s) {
			out = append(out, line)
		}
	}
	return out
}

// counts returns the attribute key of each line, in order.
func counts(lines []logLine, key string) []int64 {
	out := make([]int64, len(lines))
	for i, l := range lines {
		n, _ := l.attrs[key].(int64)
		out[i] = n
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastConfig is a Config with short backoffs and its logs captured.
func fastConfig(l *logs) driverkit.Config {
	return driverkit.Config{Logger: slog.New(l), MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}
}

// worker receives and settles as the runtime does: an Ack that fails is rewound.
func worker(ctx context.Context, t *testing.T, c transport.Consumer, decide func(*transport.Delivery) transport.Settlement) {
	for {
		d, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, transport.ErrClosed) {
				t.Errorf("Receive: %v", err)
			}
			return
		}
		s := decide(d)
		err = c.Settle(ctx, d, s)
		if err != nil && s.Outcome != transport.Rewind && !errors.Is(err, transport.ErrAlreadySettled) {
			if rerr := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); rerr != nil && !errors.Is(rerr, transport.ErrAlreadySettled) {
				t.Errorf("Rewind after a failed settle: %v", rerr)
			}
		}
	}
}

// retryOf is the settlement of a delivery with one write of its body to "out".
func retryOf(d *transport.Delivery) transport.Settlement {
	return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: "out", Body: d.Body}}}
}

// TestEveryMessageAccountedFor: workers consume a queue through the kit while the
// driver's primitives fail on demand, and every message ends acknowledged with its
// settle write made (a write comes before its acknowledgement), none held, none left,
// nothing acknowledged or given back that was not held; afterwards the whole prefetch
// can be received again, so no slot leaked. One row per way of receiving and settling.
func TestEveryMessageAccountedFor(t *testing.T) {
	const n, prefetch, workers = 120, 6, 4
	transient := driverkittest.ErrTransient
	boom := errors.New("broker refused")
	for _, tc := range []struct {
		name   string
		cfg    func(*driverkit.Config)
		faults func(*driverkittest.Faults)
		async  bool // the driver is an AsyncWriter (driverkittest's ConsumeAsync)
	}{
		{"direct", func(c *driverkit.Config) { c.ConcurrentReceive = true }, nil, false},
		{"batched", func(c *driverkit.Config) { c.MaxBatch = 4 }, nil, false},
		{"batched concurrent", func(c *driverkit.Config) { c.MaxBatch = 3; c.ConcurrentReceive = true }, nil, false},
		{"pipelined", func(c *driverkit.Config) { c.ConcurrentReceive, c.Pipeline = true, true }, nil, false},
		{"atomic", func(c *driverkit.Config) { c.MaxBatch, c.AtomicAcks = 5, true }, nil, false},
		{"receive fails", func(c *driverkit.Config) { c.ConcurrentReceive = true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpReceive, transient, 7) }, false},
		{"write fails", func(c *driverkit.Config) { c.MaxBatch = 2 },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpWrite, boom, 5) }, false},
		{"confirm fails", func(c *driverkit.Config) { c.ConcurrentReceive = true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpConfirm, boom, 5) }, false},
		{"pipelined confirm fails", func(c *driverkit.Config) { c.ConcurrentReceive, c.Pipeline = true, true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpConfirm, boom, 5) }, false},
		{"pipelined write fails", func(c *driverkit.Config) { c.MaxBatch, c.Pipeline = 4, true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpWrite, boom, 5) }, false},
		{"ack fails", func(c *driverkit.Config) { c.ConcurrentReceive = true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpAck, boom, 5) }, false},
		{"atomic ack fails", func(c *driverkit.Config) { c.AtomicAcks = true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpAckWrites, boom, 5) }, false},
		{"everything fails", func(c *driverkit.Config) { c.MaxBatch, c.Pipeline = 3, true }, func(f *driverkittest.Faults) {
			f.Fail(driverkittest.OpReceive, transient, 4)
			f.Fail(driverkittest.OpWrite, boom, 3)
			f.Fail(driverkittest.OpConfirm, boom, 3)
		}, false},
		{"pipelined async", func(c *driverkit.Config) { c.ConcurrentReceive, c.Pipeline = true, true }, nil, true},
		{"pipelined async confirm fails", func(c *driverkit.Config) { c.ConcurrentReceive, c.Pipeline = true, true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpConfirm, boom, 5) }, true},
		{"pipelined async write fails", func(c *driverkit.Config) { c.MaxBatch, c.Pipeline = 4, true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpWrite, boom, 5) }, true},
		{"not pipelined, async", func(c *driverkit.Config) { c.ConcurrentReceive = true },
			func(f *driverkittest.Faults) { f.Fail(driverkittest.OpConfirm, boom, 5) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			broker := driverkittest.NewFake()
			ids := make([]int, n)
			for i := range ids {
				ids[i] = broker.Publish("in", fmt.Appendf(nil, "m%d", i))
			}
			faults := new(driverkittest.Faults)
			if tc.faults != nil {
				tc.faults(faults)
			}
			var l logs
			cfg := fastConfig(&l)
			tc.cfg(&cfg)
			var failedMu sync.Mutex
			failedWrites := 0
			consume := broker.Consume
			if tc.async {
				consume = broker.ConsumeAsync
			}
			c, err := consume("in", cfg, transport.ConsumeOptions{Prefetch: prefetch, SettleFailed: func(*transport.Delivery, transport.Settlement, error) {
				failedMu.Lock()
				failedWrites++
				failedMu.Unlock()
			}}, faults)
			if err != nil {
				t.Fatal(err)
			}
			wctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					worker(wctx, t, c, retryOf)
				}()
			}
			for !allAcked(broker, ids) {
				select {
				case <-ctx.Done():
					t.Fatalf("not every message was acknowledged: %d held, %d ready", broker.Held(), len(broker.Ready("in")))
				case <-time.After(5 * time.Millisecond):
				}
			}
			stop()
			wg.Wait()
			// No slot leaked: the whole prefetch can be held again.
			if held := c.Held(); held != 0 {
				t.Errorf("the consumer holds %d deliveries after every message was settled", held)
			}
			for i := range prefetch {
				broker.Publish("in", fmt.Appendf(nil, "extra%d", i))
			}
			for i := range prefetch {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := c.Receive(rctx); err != nil {
					t.Fatalf("Receive %d of the prefetch of %d after the run: %v (a slot leaked)", i+1, prefetch, err)
				}
				cancel()
			}
			if err := c.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if held := broker.Held(); held != 0 {
				t.Errorf("the broker shows %d messages held after Close", held)
			}
			if ready := broker.Ready("in"); len(ready) != prefetch {
				t.Errorf("after Close %d messages wait on the queue, want the %d held at Close given back", len(ready), prefetch)
			}
			written := map[string]int{}
			for _, m := range broker.Ready("out") {
				written[string(m.Body)]++
			}
			for i := range n {
				if written[fmt.Sprintf("m%d", i)] == 0 {
					t.Errorf("m%d was acknowledged without its settle write", i)
				}
			}
			for _, b := range broker.Breaches() {
				t.Error(b)
			}
			t.Logf("settle writes failed after Settle returned: %d; given back: %d rewound, %d after a failed settle; calls: %d receives, %d writes, %d acks",
				failedWrites, broker.GivenBack(driverkit.Rewound), broker.GivenBack(driverkit.SettleFailed),
				faults.Calls(driverkittest.OpReceive), faults.Calls(driverkittest.OpWrite), faults.Calls(driverkittest.OpAck))
		})
	}
}

func ptr[T any](v T) *T { return &v }

func allAcked(b *driverkittest.Fake, ids []int) bool {
	for _, id := range ids {
		if b.Acks(id) == 0 {
			return false
		}
	}
	return true
}

// TestAccountedOnMemory: the same run on memory://, the kit's atomic driver in the
// root module, with every fifth settle write refused.
func TestAccountedOnMemory(t *testing.T) {
	ctx := ctxT(t)
	const n, workers = 200, 4
	tr := memory.New(memory.WithLogger(slog.New(slog.DiscardHandler)))
	for i := range n {
		if err := tr.Publish(ctx, &transport.Message{Queue: "in", Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	writes := 0
	tr.FailWrites(func(m *transport.Message) error {
		mu.Lock()
		defer mu.Unlock()
		writes++
		if writes%5 == 0 {
			return errors.New("memory: refused")
		}
		return nil
	})
	c, err := tr.Consume(ctx, "in", transport.ConsumeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	if !transport.SettlesAtomically(c) {
		t.Error("memory:// does not report atomic settlements")
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(wctx, t, c, retryOf)
		}()
	}
	for len(tr.Messages("out")) < n || tr.InFlight("in") > 0 || len(tr.Messages("in")) > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("out holds %d of %d; %d in flight", len(tr.Messages("out")), n, tr.InFlight("in"))
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	wg.Wait()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range tr.Messages("out") {
		seen[string(m.Body)]++
	}
	for i := range n {
		if k := seen[fmt.Sprintf("m%d", i)]; k != 1 {
			t.Errorf("m%d written %d times, want once (an atomic settlement makes its write once)", i, k)
		}
	}
	if k := tr.InFlight("in"); k != 0 {
		t.Errorf("%d deliveries in flight after Close", k)
	}
}

// TestSettleRules is the kit's mapping of a settlement to the driver's primitives: one
// row per rule, counted through the faults' call counts.
func TestSettleRules(t *testing.T) {
	write := []*transport.Message{{Queue: "out", Body: []byte("w")}}
	boom := errors.New("refused")
	type calls map[driverkittest.Op]int
	for _, tc := range []struct {
		name    string
		cfg     driverkit.Config
		faults  func(*driverkittest.Faults)
		s       transport.Settlement
		wantErr error // matched with errors.Is; nil: no error
		calls   calls
		reason  *driverkit.Reason // the reason of the one give-back made, if checked
		held    int               // deliveries the consumer still holds after the settle
	}{
		{name: "ack", s: transport.Settlement{Outcome: transport.Ack}, calls: calls{driverkittest.OpAck: 1}},
		{name: "ack with writes", s: transport.Settlement{Outcome: transport.Ack, Writes: write},
			calls: calls{driverkittest.OpWrite: 1, driverkittest.OpConfirm: 1, driverkittest.OpAck: 1}},
		{name: "ack with writes, pipelined", cfg: driverkit.Config{Pipeline: true}, s: transport.Settlement{Outcome: transport.Ack, Writes: write},
			calls: calls{driverkittest.OpWrite: 1, driverkittest.OpConfirm: 1, driverkittest.OpAck: 1}},
		{name: "ack with writes, atomic", cfg: driverkit.Config{AtomicAcks: true, Pipeline: true}, s: transport.Settlement{Outcome: transport.Ack, Writes: write},
			calls: calls{driverkittest.OpAckWrites: 1}},
		{name: "ack without writes, atomic", cfg: driverkit.Config{AtomicAcks: true}, s: transport.Settlement{Outcome: transport.Ack},
			calls: calls{driverkittest.OpAck: 1}},
		{name: "rewind", s: transport.Settlement{Outcome: transport.Rewind}, calls: calls{driverkittest.OpGiveBack: 1}, reason: ptr(driverkit.Rewound)},
		{name: "handoff", cfg: driverkit.Config{HandOff: true}, s: transport.Settlement{Outcome: transport.HandOff}, calls: calls{driverkittest.OpHandOff: 1}},
		{name: "handoff not offered", s: transport.Settlement{Outcome: transport.HandOff}, wantErr: transport.ErrUnsupported, calls: calls{}, held: 1},
		{name: "writes with a rewind", s: transport.Settlement{Outcome: transport.Rewind, Writes: write}, wantErr: transport.ErrBadSettlement, calls: calls{}, held: 1},
		{name: "write without a queue", s: transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Body: []byte("x")}}},
			wantErr: transport.ErrBadSettlement, calls: calls{}, held: 1},
		{name: "write fails", faults: func(f *driverkittest.Faults) { f.Fail(driverkittest.OpWrite, boom, 1) },
			s: transport.Settlement{Outcome: transport.Ack, Writes: write}, wantErr: transport.ErrSettleWrite,
			calls: calls{driverkittest.OpWrite: 1}, held: 1},
		{name: "confirm fails", faults: func(f *driverkittest.Faults) { f.Fail(driverkittest.OpConfirm, boom, 1) },
			s: transport.Settlement{Outcome: transport.Ack, Writes: write}, wantErr: transport.ErrSettleWrite,
			calls: calls{driverkittest.OpWrite: 1, driverkittest.OpConfirm: 1}, held: 1},
		{name: "pipelined confirm fails", cfg: driverkit.Config{Pipeline: true}, faults: func(f *driverkittest.Faults) { f.Fail(driverkittest.OpConfirm, boom, 1) },
			s:     transport.Settlement{Outcome: transport.Ack, Writes: write},
			calls: calls{driverkittest.OpWrite: 1, driverkittest.OpConfirm: 1, driverkittest.OpGiveBack: 1}, reason: ptr(driverkit.SettleFailed)},
		{name: "ack fails", faults: func(f *driverkittest.Faults) { f.Fail(driverkittest.OpAck, boom, 1) },
			s: transport.Settlement{Outcome: transport.Ack}, wantErr: boom, calls: calls{driverkittest.OpAck: 1}, held: 1},
		{name: "give-back fails", faults: func(f *driverkittest.Faults) { f.Fail(driverkittest.OpGiveBack, boom, 1) },
			s: transport.Settlement{Outcome: transport.Rewind}, wantErr: boom, calls: calls{driverkittest.OpGiveBack: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			broker := driverkittest.NewFake()
			broker.Publish("in", []byte("m"))
			faults := new(driverkittest.Faults)
			var l logs
			cfg := tc.cfg
			cfg.Logger, cfg.MinBackoff, cfg.MaxBackoff = slog.New(&l), time.Millisecond, time.Millisecond
			c, err := broker.Consume("in", cfg, transport.ConsumeOptions{Prefetch: 1}, faults)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			d, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tc.faults != nil {
				tc.faults(faults)
			}
			err = c.Settle(ctx, d, tc.s)
			if (tc.wantErr == nil) != (err == nil) || (err != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Settle = %v, want %v", err, tc.wantErr)
			}
			if tc.cfg.Pipeline { // the pipelined rest runs in the background: Close waits for it
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, op := range []driverkittest.Op{driverkittest.OpAck, driverkittest.OpGiveBack, driverkittest.OpWrite,
				driverkittest.OpConfirm, driverkittest.OpAckWrites, driverkittest.OpHandOff} {
				if got := faults.Calls(op); got != tc.calls[op] {
					t.Errorf("%s called %d times, want %d", op, got, tc.calls[op])
				}
			}
			if tc.reason != nil && broker.GivenBack(*tc.reason) != 1 {
				t.Errorf("given back for %s %d times, want once", *tc.reason, broker.GivenBack(*tc.reason))
			}
			if got := c.Held(); !tc.cfg.Pipeline && got != tc.held {
				t.Errorf("the consumer holds %d deliveries after the settle, want %d", got, tc.held)
			}
			if err == nil || errors.Is(err, transport.ErrSettleWrite) || errors.Is(err, boom) {
				// Settled, or open again for the runtime's Rewind: a second Settle tells which.
				again := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind})
				if err == nil && !errors.Is(again, transport.ErrAlreadySettled) {
					t.Errorf("a second Settle = %v, want ErrAlreadySettled", again)
				}
				if err != nil && tc.s.Outcome == transport.Ack && again != nil {
					t.Errorf("Rewind after a failed Ack = %v, want nil", again)
				}
			}
		})
	}
}

// TestRewindAfterFailedAckIsSettleFailed: a delivery whose Ack failed is given back
// as a settle failure, not a rewind the broker counts as a failed delivery.
func TestRewindAfterFailedAckIsSettleFailed(t *testing.T) {
	ctx := ctxT(t)
	broker := driverkittest.NewFake()
	broker.Publish("in", []byte("m"))
	faults := new(driverkittest.Faults)
	var l logs
	c, err := broker.Consume("in", fastConfig(&l), transport.ConsumeOptions{}, faults)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d, _ := c.Receive(ctx)
	faults.Fail(driverkittest.OpWrite, errors.New("dlq refused"), 1)
	if err := c.Settle(ctx, d, retryOf(d)); !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Settle = %v, want ErrSettleWrite", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	if broker.GivenBack(driverkit.SettleFailed) != 1 || broker.GivenBack(driverkit.Rewound) != 0 {
		t.Errorf("given back %d times as a settle failure and %d as a rewind, want 1 and 0",
			broker.GivenBack(driverkit.SettleFailed), broker.GivenBack(driverkit.Rewound))
	}
}

// TestReceiveBackoffLogged: retryable receive failures are retried after a backoff,
// logged at the first failure and at each doubling of their count, with the cause,
// and the recovery is logged once; the driver's Receive is called once per attempt.
func TestReceiveBackoffLogged(t *testing.T) {
	ctx := ctxT(t)
	broker := driverkittest.NewFake()
	broker.Publish("in", []byte("m"))
	faults := new(driverkittest.Faults)
	faults.Fail(driverkittest.OpReceive, driverkittest.ErrTransient, 6)
	var l logs
	c, err := broker.Consume("in", fastConfig(&l), transport.ConsumeOptions{}, faults)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Receive(ctx); err != nil {
		t.Fatalf("Receive through 6 transient failures: %v", err)
	}
	if got := faults.Calls(driverkittest.OpReceive); got != 7 {
		t.Errorf("the driver's Receive was called %d times, want 7 (6 failures, then the message)", got)
	}
	failed := l.with("receive failed; retrying after a backoff")
	if got := counts(failed, "failures"); fmt.Sprint(got) != "[1 2 4]" {
		t.Errorf("receive failures logged at counts %v, want [1 2 4]", got)
	}
	for _, line := range failed {
		if line.level != slog.LevelWarn || !errors.Is(line.attrs["error"].(error), driverkittest.ErrTransient) {
			t.Errorf("failure line %v at %s: want Warn with the cause", line.attrs, line.level)
		}
	}
	if got := counts(l.with("receiving again"), "failed_before"); fmt.Sprint(got) != "[6]" {
		t.Errorf("recovery logged with failed_before %v, want [6]", got)
	}
}

// TestReceiveNeverSpins: a receive that keeps failing is retried no faster than the
// backoff allows, by one worker or by several sharing the consumer, and a worker's
// context still ends the wait.
func TestReceiveNeverSpins(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			broker := driverkittest.NewFake()
			faults := new(driverkittest.Faults)
			faults.Fail(driverkittest.OpReceive, driverkittest.ErrTransient, -1)
			var l logs
			cfg := driverkit.Config{Logger: slog.New(&l), MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, ConcurrentReceive: true}
			c, err := broker.Consume("in", cfg, transport.ConsumeOptions{Prefetch: workers}, faults)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			start := time.Now()
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					if _, err := c.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Receive = %v, want the context's deadline", err)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			calls := faults.Calls(driverkittest.OpReceive)
			// Each worker calls at most once per MinBackoff, plus its first call.
			if bound := workers * (int(elapsed/(10*time.Millisecond)) + 2); calls > bound {
				t.Errorf("%d receive calls in %s by %d workers, more than the backoff allows (%d): a spin", calls, elapsed, workers, bound)
			}
			lines := len(l.with("receive failed"))
			if lines == 0 || lines > 6 {
				t.Errorf("%d failure lines for %d failed calls, want a few (at the doublings of the count)", lines, calls)
			}
		})
	}
}

// TestReceiveReturnsPermanentErrors: an error the driver does not call retryable goes
// to the caller at once.
func TestReceiveReturnsPermanentErrors(t *testing.T) {
	broker := driverkittest.NewFake()
	broker.Publish("in", []byte("m"))
	faults := new(driverkittest.Faults)
	denied := errors.New("access refused")
	faults.Fail(driverkittest.OpReceive, denied, 1)
	var l logs
	c, err := broker.Consume("in", fastConfig(&l), transport.ConsumeOptions{}, faults)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Receive(ctxT(t)); !errors.Is(err, denied) {
		t.Fatalf("Receive = %v, want the driver's error", err)
	}
	if got := faults.Calls(driverkittest.OpReceive); got != 1 {
		t.Errorf("Receive called %d times, want 1", got)
	}
	if d, err := c.Receive(ctxT(t)); err != nil || string(d.Body) != "m" {
		t.Errorf("the next Receive = %v, %v; want the message", d, err)
	}
}

// TestSettleBackoffLogged: pipelined settle writes that fail after Settle returned
// give their deliveries back, tell SettleFailed, and make receiving back off with the
// cause logged at the doublings; the first confirmed one ends the run, logged once.
func TestSettleBackoffLogged(t *testing.T) {
	ctx := ctxT(t)
	broker := driverkittest.NewFake()
	for i := range 5 {
		broker.Publish("in", fmt.Appendf(nil, "m%d", i))
	}
	faults := new(driverkittest.Faults)
	nacked := errors.New("nacked")
	faults.Fail(driverkittest.OpConfirm, nacked, 4)
	var l logs
	cfg := fastConfig(&l)
	cfg.Pipeline = true
	var mu sync.Mutex
	var reported []error
	c, err := broker.Consume("in", cfg, transport.ConsumeOptions{SettleFailed: func(_ *transport.Delivery, _ transport.Settlement, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}}, faults)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Settle(ctx, d, retryOf(d)); err != nil {
			t.Fatalf("pipelined Settle = %v, want nil", err)
		}
		for c.Held() > 0 || broker.Held() > 0 { // the background settlement finished
			time.Sleep(time.Millisecond)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 4 {
		t.Fatalf("SettleFailed told %d times, want 4", len(reported))
	}
	for _, err := range reported {
		if !errors.Is(err, nacked) || !errors.Is(err, transport.ErrSettleWrite) {
			t.Errorf("SettleFailed got %v, want a SettleWriteError wrapping the cause", err)
		}
	}
	if got := broker.GivenBack(driverkit.SettleFailed); got != 4 {
		t.Errorf("%d deliveries given back after a failed write, want 4", got)
	}
	if got := counts(l.with("settle failed; receiving backs off"), "failures"); fmt.Sprint(got) != "[1 2 4]" {
		t.Errorf("settle failures logged at counts %v, want [1 2 4]", got)
	}
	if got := counts(l.with("settling again"), "failed_before"); fmt.Sprint(got) != "[4]" {
		t.Errorf("recovery logged with failed_before %v, want [4]", got)
	}
}

// TestCloseErrorPolicy: Close does every step whatever fails, is bounded by its
// context, and returns one error joining what failed; a second Close returns nil.
func TestCloseErrorPolicy(t *testing.T) {
	boom := errors.New("give-back refused")
	gone := errors.New("link already detached")
	for _, tc := range []struct {
		name    string
		faults  func(*driverkittest.Faults) (release func())
		want    []error
		wantMsg []string
	}{
		{name: "clean"},
		{name: "give-back fails", faults: func(f *driverkittest.Faults) func() { f.Fail(driverkittest.OpGiveBack, boom, 1); return nil },
			want: []error{boom}, wantMsg: []string{"giving back 1 unsettled deliveries"}},
		{name: "driver close fails", faults: func(f *driverkittest.Faults) func() { f.Fail(driverkittest.OpClose, gone, 1); return nil },
			want: []error{gone}},
		{name: "both fail", faults: func(f *driverkittest.Faults) func() {
			f.Fail(driverkittest.OpGiveBack, boom, 1)
			f.Fail(driverkittest.OpClose, gone, 1)
			return nil
		}, want: []error{boom, gone}},
		{name: "confirm hangs", faults: func(f *driverkittest.Faults) func() { return f.Hang(driverkittest.OpConfirm) },
			want: []error{context.DeadlineExceeded}, wantMsg: []string{"still in progress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broker := driverkittest.NewFake()
			broker.Publish("in", []byte("settled"))
			broker.Publish("in", []byte("held"))
			faults := new(driverkittest.Faults)
			var l logs
			cfg := fastConfig(&l)
			cfg.Pipeline, cfg.ConfirmTimeout = true, time.Minute
			c, err := broker.Consume("in", cfg, transport.ConsumeOptions{Prefetch: 2}, faults)
			if err != nil {
				t.Fatal(err)
			}
			bg := ctxT(t)
			d1, _ := c.Receive(bg)
			if _, err := c.Receive(bg); err != nil { // held, never settled: given back by Close
				t.Fatal(err)
			}
			var release func()
			if tc.faults != nil {
				release = tc.faults(faults)
			}
			if err := c.Settle(bg, d1, retryOf(d1)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			err = c.Close(ctx)
			if len(tc.want) == 0 && err != nil {
				t.Fatalf("Close = %v, want nil", err)
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("Close = %v, want it to match %v", err, want)
				}
			}
			for _, msg := range tc.wantMsg {
				if err == nil || !strings.Contains(err.Error(), msg) {
					t.Errorf("Close = %v, want it to say %q", err, msg)
				}
			}
			if release != nil {
				release()
			}
			if err := c.Close(bg); err != nil {
				t.Errorf("second Close = %v, want nil", err)
			}
			if _, err := c.Receive(bg); !errors.Is(err, transport.ErrClosed) {
				t.Errorf("Receive after Close = %v, want ErrClosed", err)
			}
			// Whatever Close could not finish, the broker has back: nothing is lost.
			if broker.Held() != 0 {
				t.Errorf("%d messages still held after Close", broker.Held())
			}
			for _, b := range broker.Breaches() {
				t.Error(b)
			}
		})
	}
}

// TestCloseWaitsForPipelinedSettlements: Close waits, bounded by its context, for the
// settlements in flight, whose deliveries are acknowledged once their writes are
// confirmed: the kit's waits for a Confirm, and an AsyncWriter's callbacks.
func TestCloseWaitsForPipelinedSettlements(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			ctx := ctxT(t)
			broker := driverkittest.NewFake()
			const n = 20
			ids := make([]int, n)
			for i := range ids {
				ids[i] = broker.Publish("in", fmt.Appendf(nil, "m%d", i))
			}
			faults := new(driverkittest.Faults)
			release := faults.Hang(driverkittest.OpConfirm)
			var l logs
			cfg := fastConfig(&l)
			cfg.Pipeline = true
			consume := broker.Consume
			if async {
				consume = broker.ConsumeAsync
			}
			c, err := consume("in", cfg, transport.ConsumeOptions{Prefetch: n}, faults)
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				d, err := c.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Settle(ctx, d, retryOf(d)); err != nil {
					t.Fatal(err)
				}
			}
			if acked := allAcked(broker, ids[:1]); acked {
				t.Error("a delivery was acknowledged before its write was confirmed")
			}
			go func() {
				time.Sleep(50 * time.Millisecond)
				release()
			}()
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if !allAcked(broker, ids) || len(broker.Ready("out")) != n || len(broker.Ready("in")) != 0 {
				t.Errorf("after Close: out holds %d, in holds %d; want every message written and acknowledged", len(broker.Ready("out")), len(broker.Ready("in")))
			}
		})
	}
}

// TestNewChecksTheDriver: a Config that asks for a primitive the driver lacks is an
// error at New, not a failure per message.
func TestNewChecksTheDriver(t *testing.T) {
	var d bare
	for _, cfg := range []driverkit.Config{
		{Broker: "bare"},                   // no Write
		{Broker: "bare", AtomicAcks: true}, // no AckWrites
		{Broker: "bare", HandOff: true},    // no HandOff
		{},                                 // no broker name
	} {
		if _, err := driverkit.New[int](d, cfg, transport.ConsumeOptions{}); err == nil {
			t.Errorf("New with %+v on a driver without the primitives succeeded", cfg)
		}
	}
}

// bare is a driver with the required primitives only.
type bare struct{}

func (bare) Receive(context.Context, []int) (int, error)             { return 0, transport.ErrClosed }
func (bare) Decode(int, *transport.Delivery)                         {}
func (bare) Ack(context.Context, int) error                          { return nil }
func (bare) GiveBack(context.Context, []int, driverkit.Reason) error { return nil }
func (bare) IsRetryable(error) bool                                  { return false }
func (bare) Close(context.Context) error                             { return nil }

// TestGroupClose: the transport's Close closes every consumer of its group at once,
// joins their errors, and no consumer joins afterwards.
func TestGroupClose(t *testing.T) {
	ctx := ctxT(t)
	broker := driverkittest.NewFake()
	var g driverkit.Group
	gone := errors.New("gone")
	var consumers []*driverkit.Consumer[*driverkittest.Message]
	for i := range 3 {
		faults := new(driverkittest.Faults)
		if i == 1 {
			faults.Fail(driverkittest.OpClose, gone, 1)
		}
		var l logs
		cfg := fastConfig(&l)
		cfg.Group = &g
		c, err := broker.Consume(fmt.Sprint("q", i), cfg, transport.ConsumeOptions{}, faults)
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, c)
	}
	if err := g.Close(ctx); !errors.Is(err, gone) {
		t.Errorf("Group.Close = %v, want the failing consumer's error", err)
	}
	for i, c := range consumers {
		if _, err := c.Receive(ctx); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("consumer %d after the group closed: Receive = %v, want ErrClosed", i, err)
		}
	}
	var l logs
	cfg := fastConfig(&l)
	cfg.Group = &g
	if _, err := broker.Consume("late", cfg, transport.ConsumeOptions{}, nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Consume after the group closed = %v, want ErrClosed", err)
	}
	if err := g.Close(ctx); err != nil {
		t.Errorf("second Group.Close = %v, want nil", err)
	}
}

// TestBindEndsWithClose: the context Bind returns ends when the consumer closes, so a
// Receive waiting in a client that takes a context returns, and Close is not held up.
func TestBindEndsWithClose(t *testing.T) {
	broker := driverkittest.NewFake()
	var l logs
	c, err := broker.Consume("in", fastConfig(&l), transport.ConsumeOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := c.Bind(ctxT(t))
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("bound context ended before Close")
	}
	if err := c.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("bound context still alive after Close")
	}
}

// TestPipelinedAcks: with Config.PipelineAcks an Ack without writes returns before the
// driver's Ack is made, frees the delivery's slot, and Close waits for the
// acknowledgements in flight; an Ack that fails in the background gives the delivery
// back and tells SettleFailed; one the broker took back is not given back; the
// pipeline depth bounds the acknowledgements in flight; a Transactional consumer does
// not pipeline them.
func TestPipelinedAcks(t *testing.T) {
	ack := transport.Settlement{Outcome: transport.Ack}
	open := func(t *testing.T, n int, opts transport.ConsumeOptions, depth int) (*driverkittest.Fake, *driverkittest.Faults, *driverkit.Consumer[*driverkittest.Message], *logs) {
		broker := driverkittest.NewFake()
		for i := range n {
			broker.Publish("in", fmt.Appendf(nil, "m%d", i))
		}
		faults := new(driverkittest.Faults)
		l := new(logs)
		cfg := fastConfig(l)
		cfg.PipelineAcks, cfg.ConcurrentReceive, cfg.PipelineDepth = true, true, depth
		opts.Prefetch = max(opts.Prefetch, n)
		c, err := broker.Consume("in", cfg, opts, faults)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return broker, faults, c, l
	}

	t.Run("close waits", func(t *testing.T) {
		ctx := ctxT(t)
		const n = 5
		broker, faults, c, _ := open(t, n, transport.ConsumeOptions{}, 0)
		release := faults.Hang(driverkittest.OpAck)
		for range n {
			d, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Settle(ctx, d, ack); err != nil {
				t.Fatalf("pipelined Ack = %v, want nil while the driver's Ack hangs", err)
			}
			if err := c.Settle(ctx, d, ack); !errors.Is(err, transport.ErrAlreadySettled) {
				t.Fatalf("second Settle = %v, want ErrAlreadySettled", err)
			}
		}
		if c.Held() != 0 || broker.Held() != n {
			t.Fatalf("the consumer holds %d and the broker %d, want 0 and %d (acknowledgements in flight)", c.Held(), broker.Held(), n)
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			release()
		}()
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if broker.Held() != 0 || len(broker.Ready("in")) != 0 || faults.Calls(driverkittest.OpAck) != n {
			t.Errorf("after Close the broker holds %d, %d wait, %d acks made; want every message acknowledged", broker.Held(), len(broker.Ready("in")), faults.Calls(driverkittest.OpAck))
		}
	})

	t.Run("ack fails", func(t *testing.T) {
		ctx := ctxT(t)
		boom := errors.New("ack refused")
		var mu sync.Mutex
		var told []error
		broker, faults, c, l := open(t, 1, transport.ConsumeOptions{SettleFailed: func(_ *transport.Delivery, s transport.Settlement, err error) {
			mu.Lock()
			told = append(told, err)
			mu.Unlock()
		}}, 0)
		faults.Fail(driverkittest.OpAck, boom, 1)
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Settle(ctx, d, ack); err != nil {
			t.Fatal(err)
		}
		again, err := c.Receive(ctx) // given back, delivered again
		if err != nil {
			t.Fatal(err)
		}
		if string(again.Body) != "m0" || again.Redeliveries != 1 || broker.GivenBack(driverkit.SettleFailed) != 1 {
			t.Fatalf("after a failed Ack got %q (redeliveries %d), %d given back; want m0 given back once", again.Body, again.Redeliveries, broker.GivenBack(driverkit.SettleFailed))
		}
		mu.Lock()
		if len(told) != 1 || !errors.Is(told[0], boom) {
			t.Errorf("SettleFailed told %v, want the Ack's error once", told)
		}
		mu.Unlock()
		if err := c.Settle(ctx, again, ack); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// Logged by the pipeline, which may give the delivery back (and the Receive
		// above return it) before it writes the line; Close waits for the pipeline.
		if len(l.with("settle failed")) != 1 {
			t.Errorf("the failed Ack was not logged as a failed settlement")
		}
		if broker.Acks(1) != 1 {
			t.Errorf("message acknowledged %d times, want once", broker.Acks(1))
		}
	})

	t.Run("taken back", func(t *testing.T) {
		ctx := ctxT(t)
		broker, faults, c, l := open(t, 1, transport.ConsumeOptions{SettleFailed: func(*transport.Delivery, transport.Settlement, error) {
			t.Error("SettleFailed told of an Ack the broker took back")
		}}, 0)
		faults.Fail(driverkittest.OpAck, &transport.TakenBackError{Broker: "fake", Queue: "in", Reason: "its channel closed"}, 1)
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Settle(ctx, d, ack); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if broker.GivenBack(driverkit.SettleFailed) != 0 || len(l.with("could not be acknowledged")) != 1 {
			t.Errorf("a taken-back Ack: %d given back, logged %d times; want none given back, logged once",
				broker.GivenBack(driverkit.SettleFailed), len(l.with("could not be acknowledged")))
		}
	})

	t.Run("depth", func(t *testing.T) {
		ctx := ctxT(t)
		_, faults, c, _ := open(t, 3, transport.ConsumeOptions{}, 2)
		release := faults.Hang(driverkittest.OpAck)
		defer release()
		for i := range 3 {
			d, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err = c.Settle(sctx, d, ack)
			cancel()
			if i < 2 && err != nil {
				t.Fatalf("Ack %d = %v, want nil (room in the pipeline)", i, err)
			}
			if i == 2 && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Ack beyond the pipeline depth = %v, want it to wait for room until its context ends", err)
			}
		}
	})

	t.Run("transactional", func(t *testing.T) {
		ctx := ctxT(t)
		boom := errors.New("ack refused")
		broker, faults, c, _ := open(t, 1, transport.ConsumeOptions{Transactional: true}, 0)
		faults.Fail(driverkittest.OpAck, boom, 1)
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Settle(ctx, d, ack); !errors.Is(err, boom) {
			t.Fatalf("Ack of a Transactional consumer = %v, want the driver's error before Settle returns", err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
			t.Fatal(err)
		}
		if broker.GivenBack(driverkit.SettleFailed) != 1 {
			t.Errorf("the Rewind after the failed Ack gave back %d, want 1", broker.GivenBack(driverkit.SettleFailed))
		}
	})
}
