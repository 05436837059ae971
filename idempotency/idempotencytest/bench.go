package idempotencytest

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// Bench measures what the middleware costs per message through the runtime on
// memory://: b.N messages (each with its own meta.id) wait on the queue before the
// clock starts, then workers receive, handle (the handler does nothing), remember and
// acknowledge them. Sub-benchmarks, for 1 and 8 workers: "none" is the baseline without
// the middleware, "seen-set" and "claim" the two modes over the store cfg opens.
func Bench(b *testing.B, cfg Config) {
	for _, workers := range []int{1, 8} {
		for _, mode := range []string{"none", "seen-set", "claim"} {
			b.Run(mode+"/workers="+map[int]string{1: "1", 8: "8"}[workers], func(b *testing.B) {
				var mw babelqueue.Middleware
				switch mode {
				case "seen-set":
					mw = middleware(b, cfg.NewStore(b, 0), idempotency.ModeSeenSet)
				case "claim":
					mw = middleware(b, cfg.NewStore(b, 0), idempotency.ModeClaim)
				}
				benchRun(b, workers, mw)
			})
		}
	}
}

func middleware(b *testing.B, s idempotency.Store, mode idempotency.Mode) babelqueue.Middleware {
	mw, err := idempotency.Middleware(s, idempotency.WithMode(mode))
	if err != nil {
		b.Fatal(err)
	}
	return mw
}

func benchRun(b *testing.B, workers int, mw babelqueue.Middleware) {
	const queue, urn = "bench", "urn:babel:orders:created"
	tr := memory.New()
	app, err := babelqueue.New(tr, babelqueue.WithQueue(queue), babelqueue.WithConcurrency(workers),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		env, err := envelope.Make(urn, map[string]int{"order_id": i}, envelope.WithQueue(queue))
		if err != nil {
			b.Fatal(err)
		}
		body, err := env.Encode()
		if err != nil {
			b.Fatal(err)
		}
		tr.Inject(queue, memory.Stored{Body: body})
	}
	var n atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	app.Use(func(next babelqueue.Handler) babelqueue.Handler { // counts after the middleware's remember
		return func(ctx context.Context, m *babelqueue.Message) error {
			err := next(ctx, m)
			if n.Add(1) == target {
				close(done)
			}
			return err
		}
	})
	if mw != nil {
		app.Use(mw)
	}
	app.Handle(urn, func(context.Context, *babelqueue.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { errc <- app.Run(ctx) }()
	<-done
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// BenchCalls measures the store's calls one at a time, each on a new id: "seen", "claim"
// (the call before the handler in each mode) and "remember" (the call after it), beside
// "round-trip", one call of roundTrip (a PING, a SELECT 1 to the same server; skipped
// when nil), which tells how many round trips a call costs.
func BenchCalls(b *testing.B, cfg Config, roundTrip func(ctx context.Context) error) {
	ctx := context.Background()
	if roundTrip != nil {
		b.Run("round-trip", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := roundTrip(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	s := cfg.NewStore(b, 0)
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = NewID()
		}
		return out
	}
	b.Run("seen", func(b *testing.B) {
		id := ids(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := s.Seen(ctx, id[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remember", func(b *testing.B) {
		id := ids(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := s.Remember(ctx, id[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	cs, ok := s.(idempotency.ClaimStore)
	if !ok {
		return
	}
	b.Run("claim", func(b *testing.B) {
		id := ids(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := cs.Claim(ctx, id[i], time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// RunMessages sends n messages, each with its own meta.id, through the middleware in
// mode over s, with the runtime on memory:// and one worker, and returns once all are
// acknowledged: a store module counts the calls its client made meanwhile.
func RunMessages(t *testing.T, s idempotency.Store, mode idempotency.Mode, n int) {
	const queue, urn = "idempotency-calls", "urn:babel:idempotency:calls"
	tr := memory.New()
	counter := &settleCounter{done: make(chan struct{}), want: int64(n)}
	app, err := babelqueue.New(tr, babelqueue.WithQueue(queue), babelqueue.WithObserver(counter),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.Middleware(s, idempotency.WithMode(mode))
	if err != nil {
		t.Fatal(err)
	}
	app.Use(mw)
	app.Handle(urn, func(context.Context, *babelqueue.Message) error { return nil })
	for i := range n {
		env, err := envelope.Make(urn, map[string]int{"n": i}, envelope.WithQueue(queue))
		if err != nil {
			t.Fatal(err)
		}
		body, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		tr.Inject(queue, memory.Stored{Body: body})
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	select {
	case <-counter.done:
	case <-time.After(time.Minute):
		t.Errorf("%d of %d messages acknowledged within a minute", counter.acked.Load(), n)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
