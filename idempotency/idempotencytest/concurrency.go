package idempotencytest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// The shape of RunConcurrency.
const (
	RaceWorkers  = 8
	RaceMessages = 2000
	// RaceEffect is how long the handler's effect takes.
	RaceEffect = time.Millisecond
)

// RaceResult is what a race came to.
type RaceResult struct {
	// Effects is how many times the handler ran, all ids together.
	Effects int
	// Doubles is how many ids ran twice.
	Doubles int
	// Requeued is how many deliveries were given back because their id was held.
	Requeued int
	// Elapsed is the time from the start of the workers to the last acknowledgement.
	Elapsed time.Duration
}

// RunConcurrency runs [Race] in claim mode, which must run exactly RaceMessages
// effects, and in seen-set mode, whose doubles it logs.
func RunConcurrency(t *testing.T, cfg Config) {
	t.Run("claim", func(t *testing.T) {
		r := Race(t, cfg, idempotency.ModeClaim)
		t.Logf("claim mode: %d effects for %d messages delivered twice, %d deliveries requeued, %s",
			r.Effects, RaceMessages, r.Requeued, r.Elapsed.Round(time.Millisecond))
		if r.Effects != RaceMessages || r.Doubles != 0 {
			t.Fatalf("claim mode ran %d effects (%d ids twice) for %d messages; want exactly one each",
				r.Effects, r.Doubles, RaceMessages)
		}
	})
	t.Run("seen-set", func(t *testing.T) {
		r := Race(t, cfg, idempotency.ModeSeenSet)
		t.Logf("seen-set mode: %d effects for %d messages delivered twice: %d ran twice (%.1f%%), %s",
			r.Effects, RaceMessages, r.Doubles, 100*float64(r.Doubles)/RaceMessages, r.Elapsed.Round(time.Millisecond))
	})
}

// Race has RaceWorkers workers, each an App with its own store from cfg, consume one
// memory:// queue holding RaceMessages messages, each published twice side by side,
// through the middleware in mode. Every id must run at least once and at most twice,
// and every delivery must end acknowledged.
func Race(t *testing.T, cfg Config, mode idempotency.Mode) RaceResult {
	const queue, urn = "idempotency-race", "urn:babel:idempotency:race"
	tr := memory.New()
	ids := make([]string, RaceMessages)
	for i := range ids {
		env, err := envelope.Make(urn, map[string]int{"n": i}, envelope.WithQueue(queue))
		if err != nil {
			t.Fatal(err)
		}
		body, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = env.Meta.ID
		tr.Inject(queue, memory.Stored{Body: body})
		tr.Inject(queue, memory.Stored{Body: body})
	}

	var mu sync.Mutex
	effects := make(map[string]int, RaceMessages)
	counter := &settleCounter{done: make(chan struct{}), want: 2 * RaceMessages}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	apps := make([]*babelqueue.App, RaceWorkers)
	for w := range apps {
		store := cfg.NewStore(t, 0)
		mw, err := idempotency.Middleware(store, idempotency.WithMode(mode),
			idempotency.WithLease(time.Minute), idempotency.WithHeldRetry(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		app, err := babelqueue.New(tr, babelqueue.WithQueue(queue), babelqueue.WithLogger(quiet),
			babelqueue.WithObserver(counter))
		if err != nil {
			t.Fatal(err)
		}
		app.Use(mw)
		app.Handle(urn, func(_ context.Context, m *babelqueue.Message) error {
			time.Sleep(RaceEffect)
			mu.Lock()
			effects[m.ID()]++
			mu.Unlock()
			return nil
		})
		apps[w] = app
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for _, app := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := app.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	select {
	case <-counter.done:
	case <-time.After(2 * time.Minute):
		t.Errorf("only %d of %d deliveries were acknowledged within 2 minutes", counter.acked.Load(), 2*RaceMessages)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()

	r := RaceResult{Requeued: int(counter.requeued.Load()), Elapsed: elapsed}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		n := effects[id]
		switch {
		case n == 0:
			t.Errorf("message %s never ran", id)
		case n > 2:
			t.Errorf("message %s delivered twice ran %d times", id, n)
		case n == 2:
			r.Doubles++
		}
		r.Effects += n
	}
	return r
}

// settleCounter counts the deliveries acknowledged after their handler (or the
// middleware) returned nil, and those requeued.
type settleCounter struct {
	want     int64
	acked    atomic.Int64
	requeued atomic.Int64
	done     chan struct{}
}

// OnSettled implements [babelqueue.SettleHook].
func (c *settleCounter) OnSettled(_ context.Context, e babelqueue.SettledEvent) {
	switch {
	case e.Err != nil:
	case e.Kind == babelqueue.KindRequeued:
		c.requeued.Add(1)
	case e.Kind == babelqueue.KindHandled && e.Action == babelqueue.ActionAck:
		if c.acked.Add(1) == c.want {
			close(c.done)
		}
	}
}
