package redis_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// failedSettles counts the settlements the runtime reports as failed.
type failedSettles struct{ n atomic.Int64 }

func (f *failedSettles) OnSettled(_ context.Context, ev babelqueue.SettledEvent) {
	if ev.Err != nil {
		f.n.Add(1)
	}
}

// Issue 16: a 5 s cut between the worker and Redis, while every worker holds a delivery
// (prefetch = concurrency). The acks fail, their rewinds fail too; before the shared
// consumer ledger each such delivery kept its prefetch slot for ever and the consumer
// stopped receiving, silently, with messages waiting. Now a failed rewind frees the
// slot, the reservation lapses back to the queue after retry_after, and every message is
// handled once Redis is reachable again. The failures are logged with their cause and
// back off instead of spinning.
func TestOutageDoesNotLeakPrefetchSlots(t *testing.T) {
	for _, layout := range []struct{ name, query string }{
		{"default", "?retry_after=2"},
		{"laravel", "?retry_after=2&laravel=1&prefix=bqtest:"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			raw := brokerURL(t)
			admin := client(t)
			cleanKeys(t, admin, "*bqtest-*")
			u, cutRedis := transporttest.ProxyURL(t, raw)
			q := transporttest.UniqueName("bqtest")
			const total, workers = 120, 4

			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()

			logs := &transporttest.LogBuffer{}
			log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			failed := &failedSettles{}
			app, err := babelqueue.Open(ctx, u+layout.query, babelqueue.WithQueue(q), babelqueue.WithConcurrency(workers),
				babelqueue.WithLogger(log), babelqueue.WithObserver(failed), babelqueue.WithSettleTimeout(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close(context.Background())
			for i := range total {
				if _, err := app.Publish(ctx, "urn:babel:outage:job", map[string]int{"n": i}); err != nil {
					t.Fatal(err)
				}
			}

			var (
				mu      sync.Mutex
				handled = map[int]int{}
				cut     sync.Once
				cutDone = make(chan struct{})
			)
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			babelqueue.Handle(app, "urn:babel:outage:job", func(_ context.Context, p struct{ N int }, _ *babelqueue.Message) error {
				mu.Lock()
				handled[p.N]++
				n := len(handled)
				mu.Unlock()
				if n == 20 {
					// Every worker is inside a handler now: cut Redis away for 5 s.
					cut.Do(func() {
						go func() {
							restore := cutRedis()
							time.Sleep(5 * time.Second)
							restore()
							close(cutDone)
						}()
					})
				}
				time.Sleep(30 * time.Millisecond)
				return nil
			})
			// Stop once every message was handled and Redis holds none of them: the
			// deliveries whose ack failed came back (after retry_after) and were acked.
			keys := []string{q, q + ":processing", q + ":processing:deadlines"}
			if strings.Contains(layout.query, "laravel") {
				keys = []string{"bqtest:" + q, "bqtest:" + q + ":reserved", "bqtest:" + q + ":delayed"}
			}
			go func() {
				for runCtx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
					mu.Lock()
					all := len(handled) == total
					mu.Unlock()
					if all && admin.Exists(ctx, keys...).Val() == 0 {
						stop()
					}
				}
			}()
			errc := make(chan error, 1)
			go func() { errc <- app.Run(runCtx) }()
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-ctx.Done():
			}
			stop()
			<-cutDone
			mu.Lock()
			defer mu.Unlock()
			if len(handled) != total || admin.Exists(context.Background(), keys...).Val() != 0 {
				t.Fatalf("after a 5 s cut the workers handled %d of %d messages and Redis still holds some: the consumer stopped (%d settlements failed)\n%s",
					len(handled), total, failed.n.Load(), logs.String())
			}
			out := logs.String()
			if failed.n.Load() == 0 || !strings.Contains(out, "settle failed") {
				t.Fatalf("the cut failed no settlement (%d) or the ledger did not log it: the test did not test the outage\n%s", failed.n.Load(), out)
			}
			// Never spin: each worker's delivery fails its ack and its rewind, a few
			// times at most, however long the cut.
			if n := failed.n.Load(); n > 4*workers {
				t.Fatalf("%d failed settlements during one 5 s cut with %d workers: settling spins", n, workers)
			}
			if !strings.Contains(out, "connection refused") && !strings.Contains(out, "EOF") && !strings.Contains(out, "reset") {
				t.Errorf("the settle failures were not logged with their cause:\n%s", out)
			}
			t.Logf("%d messages handled, %d failed settlements, %d handled twice", len(handled), failed.n.Load(), redelivered(handled))
		})
	}
}

func redelivered(h map[int]int) int {
	n := 0
	for _, k := range h {
		if k > 1 {
			n++
		}
	}
	return n
}
