package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// Each benchmark op is one message through its whole life: publish (RPUSH), reserve
// (BLMOVE into <q>:processing) and acknowledge (LREM), by `workers` goroutines.

var benchWorkers = []struct {
	name string
	n    int
}{{"workers=1", 1}, {"workers=8", 8}}

// split runs fn(i) b.N times over n goroutines.
func split(b *testing.B, n int, fn func()) {
	var wg sync.WaitGroup
	per := b.N / n
	for w := range n {
		k := per
		if w == 0 {
			k += b.N % n
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range k {
				fn()
			}
		}()
	}
	wg.Wait()
}

// BenchmarkRaw is go-redis doing the same commands, one message at a time per worker.
func BenchmarkRaw(b *testing.B) {
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) {
			c := client(b)
			ctx := context.Background()
			q := transporttest.UniqueName("bqbench")
			cleanKeys(b, c, q+"*")
			body := envelope("bench")
			b.ReportAllocs()
			b.ResetTimer()
			split(b, w.n, func() {
				if err := c.RPush(ctx, q, body).Err(); err != nil {
					b.Error(err)
					return
				}
				el, err := c.BLMove(ctx, q, q+":processing", "LEFT", "RIGHT", 0).Result()
				if err != nil {
					b.Error(err)
					return
				}
				if err := c.LRem(ctx, q+":processing", 1, el).Err(); err != nil {
					b.Error(err)
				}
			})
		})
	}
}

// BenchmarkTransport is the transport doing the same work: Publish, Receive, Settle(Ack),
// with its reservation deadlines and gated settle script.
func BenchmarkTransport(b *testing.B) {
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) {
			c := client(b)
			ctx := context.Background()
			q := transporttest.UniqueName("bqbench")
			cleanKeys(b, c, q+"*")
			tr := bqredis.New(c)
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: w.n})
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close(ctx)
			body := envelope("bench")
			b.ReportAllocs()
			b.ResetTimer()
			split(b, w.n, func() {
				if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
					b.Error(err)
					return
				}
				d, err := cons.Receive(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
					b.Error(err)
				}
			})
		})
	}
}

// BenchmarkPaired interleaves the two: chunks of pairedChunk messages go through raw
// go-redis and then through the transport, alternately, for b.N messages each, so both
// sides see the same machine load (this machine is shared). It reports each side's
// ns per message and the ratio raw/transport (above 1: the transport is faster).
func BenchmarkPaired(b *testing.B) {
	const pairedChunk = 256
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) {
			c := client(b)
			ctx := context.Background()
			rq := transporttest.UniqueName("bqbench")
			tq := transporttest.UniqueName("bqbench")
			cleanKeys(b, c, rq+"*")
			cleanKeys(b, c, tq+"*")
			tr := bqredis.New(c)
			cons, err := tr.Consume(ctx, tq, transport.ConsumeOptions{Prefetch: w.n})
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close(ctx)
			body := envelope("bench")
			raw := func() {
				if err := c.RPush(ctx, rq, body).Err(); err != nil {
					b.Error(err)
					return
				}
				el, err := c.BLMove(ctx, rq, rq+":processing", "LEFT", "RIGHT", 0).Result()
				if err != nil {
					b.Error(err)
					return
				}
				if err := c.LRem(ctx, rq+":processing", 1, el).Err(); err != nil {
					b.Error(err)
				}
			}
			bq := func() {
				if err := tr.Publish(ctx, &transport.Message{Queue: tq, Body: body}); err != nil {
					b.Error(err)
					return
				}
				d, err := cons.Receive(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
					b.Error(err)
				}
			}
			var rawT, bqT time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += pairedChunk {
				k := min(pairedChunk, b.N-done)
				start := time.Now()
				splitN(k, w.n, raw)
				rawT += time.Since(start)
				start = time.Now()
				splitN(k, w.n, bq)
				bqT += time.Since(start)
			}
			b.StopTimer()
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(rawT.Nanoseconds())/float64(b.N), "raw-ns/msg")
			b.ReportMetric(float64(bqT.Nanoseconds())/float64(b.N), "bq-ns/msg")
			b.ReportMetric(float64(rawT)/float64(bqT), "raw/bq")
		})
	}
}

// splitN runs fn k times over n goroutines.
func splitN(k, n int, fn func()) {
	var wg sync.WaitGroup
	for w := range n {
		m := k / n
		if w < k%n {
			m++
		}
		wg.Go(func() {
			for range m {
				fn()
			}
		})
	}
	wg.Wait()
}
