package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkConsumePaired is issue 39's consume throughput: workers wait on an empty
// queue, a burst of consumeChunk messages is pushed at once (one RPUSH), and the clock
// runs until every one was received and acknowledged. "raw" is go-redis, each worker
// BLMOVE into a processing list, then LREM; "bq" the transport's consumer with
// synchronous acks (the default) and the family's layout, each worker Receive, then
// Settle(Ack). The sides take turns burst by burst, so both see the same load on this
// shared machine; it reports each side's ns per message, raw/bq (above 1: the transport
// is faster), and the CPU per message of each side's client (this process) and of
// redis-server (INFO cpu: other clients of a shared server count too; point
// BQ_REDIS_URL at a Redis of the benchmark's own for clean figures). "layout" is the
// floor of the family's layout (layoutReserve, layoutSettle: each worker one reserve
// script, on an empty list the look with that script behind it, then one gated settle
// script): raw/layout is what the layout costs, layout/bq what the transport adds to it.
//
//	CI=true go test -run '^$' -bench ConsumePaired -benchtime 8192x ./transport/redis/
func BenchmarkConsumePaired(b *testing.B) {
	for _, c := range []struct{ workers, prefetch int }{{1, 1}, {8, 8}, {8, 80}} {
		b.Run(fmt.Sprintf("workers=%d/prefetch=%d", c.workers, c.prefetch), func(b *testing.B) {
			consumePaired(b, c.workers, c.prefetch)
		})
	}
}

func consumePaired(b *testing.B, workers, prefetch int) {
	const consumeChunk = 512
	ctx := context.Background()
	c := client(b)
	rq, tq := transporttest.UniqueName("bqbench-consume"), transporttest.UniqueName("bqbench-consume")
	yq := transporttest.UniqueName("bqbench-consume")
	for _, q := range []string{rq, tq, yq} {
		cleanKeys(b, c, q+"*")
	}
	opts, err := goredis.ParseURL(brokerURL(b))
	if err != nil {
		b.Fatal(err)
	}
	opts.PoolSize = 4 * workers
	rc := goredis.NewClient(opts)
	defer rc.Close()
	tr, err := transport.Open(ctx, brokerURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(ctx)
	cons, err := tr.Consume(ctx, tq, transport.ConsumeOptions{Prefetch: prefetch})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var rawDone, bqDone, layoutDone atomic.Int64
	for _, s := range []*goredis.Script{layoutReserve, layoutSettle} {
		if err := s.Load(ctx, rc).Err(); err != nil {
			b.Fatal(err)
		}
	}
	ykeys := layoutKeys(yq)
	for range workers {
		go func() {
			for runCtx.Err() == nil {
				tok := layoutToken()
				el, err := layoutReserve.EvalSha(runCtx, rc, ykeys, layoutDeadline(), tok).Text()
				if errors.Is(err, goredis.Nil) { // empty: the look, the script behind it
					p := rc.Pipeline()
					p.Do(runCtx, "blmove", yq, yq, "LEFT", "LEFT", "1")
					moved := p.EvalSha(runCtx, layoutReserve.Hash(), ykeys, layoutDeadline(), tok)
					_, _ = p.Exec(runCtx)
					el, err = moved.Text()
				}
				if err != nil {
					continue
				}
				if layoutSettle.EvalSha(runCtx, rc, ykeys[1:], tok, el).Err() == nil {
					layoutDone.Add(1)
				}
			}
		}()
		go func() {
			for runCtx.Err() == nil {
				el, err := rc.BLMove(runCtx, rq, rq+":processing", "LEFT", "RIGHT", time.Second).Result()
				if errors.Is(err, goredis.Nil) || err != nil {
					continue
				}
				if rc.LRem(runCtx, rq+":processing", 1, el).Err() == nil {
					rawDone.Add(1)
				}
			}
		}()
		go func() {
			for runCtx.Err() == nil {
				d, err := cons.Receive(runCtx)
				if err != nil {
					continue
				}
				if cons.Settle(runCtx, d, transport.Settlement{Outcome: transport.Ack}) == nil {
					bqDone.Add(1)
				}
			}
		}()
	}
	body := envelope("consume")
	type cost struct{ wall, cpu, server time.Duration }
	burst := func(q string, done *atomic.Int64, k int, into *cost) {
		vals := make([]any, k)
		for i := range vals {
			vals[i] = body
		}
		want := done.Load() + int64(k)
		server := serverCPU(b, c)
		cpu := transporttest.ProcessCPU()
		start := time.Now()
		if err := c.RPush(ctx, q, vals...).Err(); err != nil {
			b.Fatal(err)
		}
		for done.Load() < want {
			time.Sleep(20 * time.Microsecond)
		}
		into.wall += time.Since(start)
		into.cpu += transporttest.ProcessCPU() - cpu
		into.server += serverCPU(b, c) - server
	}
	var raw, bq, layout cost
	burst(rq, &rawDone, 64, &raw) // warm up: connections, script cache
	burst(tq, &bqDone, 64, &bq)
	burst(yq, &layoutDone, 64, &layout)
	raw, bq, layout = cost{}, cost{}, cost{}
	b.ResetTimer()
	for n := 0; n < b.N; n += consumeChunk {
		k := min(consumeChunk, b.N-n)
		burst(rq, &rawDone, k, &raw)
		burst(tq, &bqDone, k, &bq)
		burst(yq, &layoutDone, k, &layout)
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(per(raw.wall), "raw-ns/msg")
	b.ReportMetric(per(bq.wall), "bq-ns/msg")
	b.ReportMetric(per(layout.wall), "layout-ns/msg")
	b.ReportMetric(float64(raw.wall)/float64(bq.wall), "raw/bq")
	b.ReportMetric(float64(raw.wall)/float64(layout.wall), "raw/layout")
	b.ReportMetric(float64(layout.wall)/float64(bq.wall), "layout/bq")
	b.ReportMetric(per(raw.cpu)/1e3, "raw-cpu-µs/msg")
	b.ReportMetric(per(bq.cpu)/1e3, "bq-cpu-µs/msg")
	b.ReportMetric(per(layout.cpu)/1e3, "layout-cpu-µs/msg")
	b.ReportMetric(per(raw.server)/1e3, "raw-redis-µs/msg")
	b.ReportMetric(per(bq.server)/1e3, "bq-redis-µs/msg")
	b.ReportMetric(per(layout.server)/1e3, "layout-redis-µs/msg")
}

// serverCPU is the CPU time redis-server used so far (INFO cpu).
func serverCPU(b *testing.B, c *goredis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
