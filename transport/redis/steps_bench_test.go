package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkSteps is one message at a time on one goroutine, each step after the other:
// push (RPUSH), reserve, acknowledge; no waiting, no other goroutine, so that the CPU
// profile and the allocations of each side are its own (go test -cpuprofile,
// -benchmem). "raw" reserves with LMOVE and acknowledges with LREM; "layout" with the
// family's layout floor (layoutReserve, layoutSettle); "bq" is the transport's consumer
// (Receive, Settle(Ack), prefetch 1). It reports the client CPU per message.
//
//	CI=true go test -run '^$' -bench Steps -benchmem -benchtime 20000x ./transport/redis/
func BenchmarkSteps(b *testing.B) {
	ctx := context.Background()
	c := client(b)
	body := envelope("steps")
	run := func(b *testing.B, step func(q string) error) {
		q := transporttest.UniqueName("bqbench-steps")
		cleanKeys(b, c, q+"*")
		for range 100 { // warm up: connections, script cache
			if err := step(q); err != nil {
				b.Fatal(err)
			}
		}
		cpu := transporttest.ProcessCPU()
		b.ResetTimer()
		for range b.N {
			if err := step(q); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64((transporttest.ProcessCPU()-cpu).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/msg")
	}
	b.Run("raw", func(b *testing.B) {
		run(b, func(q string) error {
			if err := c.RPush(ctx, q, body).Err(); err != nil {
				return err
			}
			el, err := c.LMove(ctx, q, q+":processing", "LEFT", "RIGHT").Result()
			if err != nil {
				return err
			}
			return c.LRem(ctx, q+":processing", 1, el).Err()
		})
	})
	b.Run("layout", func(b *testing.B) {
		for _, s := range []*goredis.Script{layoutReserve, layoutSettle} {
			if err := s.Load(ctx, c).Err(); err != nil {
				b.Fatal(err)
			}
		}
		run(b, func(q string) error {
			if err := c.RPush(ctx, q, body).Err(); err != nil {
				return err
			}
			keys, tok := layoutKeys(q), layoutToken()
			el, err := layoutReserve.EvalSha(ctx, c, keys, layoutDeadline(), tok).Text()
			if err != nil {
				return err
			}
			return layoutSettle.EvalSha(ctx, c, keys[1:], tok, el).Err()
		})
	})
	b.Run("bq", func(b *testing.B) {
		tr := newTransport(b, c)
		conss := map[string]transport.Consumer{}
		run(b, func(q string) error {
			cons := conss[q]
			if cons == nil {
				var err error
				if cons, err = tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1}); err != nil {
					return err
				}
				conss[q] = cons
			}
			if err := c.RPush(ctx, q, body).Err(); err != nil {
				return err
			}
			d, err := cons.Receive(ctx)
			if err != nil {
				return err
			}
			return cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
		})
		for _, cons := range conss {
			_ = cons.Close(ctx)
		}
	})
}
