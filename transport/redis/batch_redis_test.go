package redis_test

import (
	"context"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestManyWorkersEachMessageOnce drives the grouped paths — concurrent publishes, one
// reserve call for many waiting workers, acks and rewinds of several workers in one settle
// call — against the real Redis: every message is acked exactly once, every rewound one
// comes back, and nothing is left reserved or queued.
func TestManyWorkersEachMessageOnce(t *testing.T) {
	for _, layout := range []struct {
		name   string
		opts   []bqredis.Option
		prefix string
		left   []string // key suffixes that must be gone at the end
	}{
		{"default", nil, "", []string{"", ":processing", ":processing:deadlines"}},
		{"laravel", []bqredis.Option{bqredis.WithLaravel("bqtest:")}, "bqtest:", []string{"", ":reserved"}},
	} {
		t.Run(layout.name, func(t *testing.T) {
			const publishers, perPublisher, workers = 4, 250, 16
			const total = publishers * perPublisher
			ctx := ctxT(t)
			admin := client(t)
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, admin, "*"+q+"*")
			tr := newTransport(t, client(t), layout.opts...)
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: workers})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close(context.Background())

			var pub sync.WaitGroup
			for p := range publishers {
				pub.Go(func() {
					for i := range perPublisher {
						n := strconv.Itoa(p*perPublisher + i)
						if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: envelope(n)}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}

			var (
				mu       sync.Mutex
				acked    = map[string]int{}
				rewound  = map[string]bool{}
				received atomic.Int64
			)
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			var work sync.WaitGroup
			for range workers {
				work.Go(func() {
					for {
						d, err := cons.Receive(runCtx)
						if err != nil {
							if runCtx.Err() == nil {
								t.Error(err)
							}
							return
						}
						received.Add(1)
						body := string(d.Body)
						mu.Lock()
						h := fnv.New32a()
						h.Write(d.Body)
						rewind := h.Sum32()%4 == 0 && !rewound[body] // about a quarter, once each
						if rewind {
							rewound[body] = true
						}
						mu.Unlock()
						outcome := transport.Ack
						if rewind {
							outcome = transport.Rewind
						}
						if err := cons.Settle(runCtx, d, transport.Settlement{Outcome: outcome}); err != nil {
							t.Errorf("%v: %v", outcome, err)
							return
						}
						if rewind {
							continue
						}
						mu.Lock()
						acked[body]++
						all := len(acked) == total
						mu.Unlock()
						if all {
							stop()
						}
					}
				})
			}
			pub.Wait()
			work.Wait()

			if len(rewound) == 0 {
				t.Error("no message was rewound")
			}
			if len(acked) != total {
				t.Fatalf("acked %d distinct messages of %d", len(acked), total)
			}
			for body, n := range acked {
				if n != 1 {
					t.Errorf("message %s acked %d times", body, n)
				}
			}
			if want := int64(total + len(rewound)); received.Load() != want {
				t.Errorf("received %d deliveries, want %d (%d rewound once)", received.Load(), want, len(rewound))
			}
			for _, suffix := range layout.left {
				k := layout.prefix + q + suffix
				if n := admin.Exists(context.Background(), k).Val(); n != 0 {
					t.Errorf("key %s still exists after every message was acked", k)
				}
			}
		})
	}
}
