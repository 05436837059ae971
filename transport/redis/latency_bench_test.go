package redis_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkIdleLatency is issue 39's idle-queue latency: one consumer waits on an empty
// queue, a message is pushed (RPUSH by a client of its own, the same for both sides),
// and the clock stops when the consumer has it in hand; the consumer then acknowledges
// it (outside the clock) and the next message comes idleGap after that, so that every message finds the
// consumer waiting. "raw" is go-redis blocked in BLMOVE into a processing list (then
// LREM); "bq" is the transport's consumer (Receive, then Settle(Ack), prefetch 1). The
// sides take turns message by message, so both see the same load on this shared
// machine. It reports each side's p50 and p99 in µs, their ratios (bq over raw), and each
// side's client CPU per message (publisher included, the same on both sides).
//
//	CI=true go test -run '^$' -bench IdleLatency -benchtime 400x ./transport/redis/
func BenchmarkIdleLatency(b *testing.B) {
	const idleGap = 3 * time.Millisecond
	ctx := context.Background()
	c := client(b)
	pub := client(b)
	rq, tq := transporttest.UniqueName("bqbench-idle"), transporttest.UniqueName("bqbench-idle")
	for _, q := range []string{rq, tq} {
		cleanKeys(b, c, q+"*")
	}
	tr, err := transport.Open(ctx, brokerURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(ctx)
	cons, err := tr.Consume(ctx, tq, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		b.Fatal(err)
	}
	body := envelope("idle")

	// Each consumer runs on a goroutine of its own and reports when it holds a message.
	type side struct {
		q   string
		got chan time.Time
		lat []time.Duration
		cpu time.Duration
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	raw := &side{q: rq, got: make(chan time.Time, 1)}
	bq := &side{q: tq, got: make(chan time.Time, 1)}
	go func() {
		for runCtx.Err() == nil {
			el, err := c.BLMove(runCtx, rq, rq+":processing", "LEFT", "RIGHT", time.Second).Result()
			if errors.Is(err, goredis.Nil) {
				continue
			}
			if err != nil {
				return
			}
			now := time.Now()
			if err := c.LRem(runCtx, rq+":processing", 1, el).Err(); err != nil {
				return
			}
			raw.got <- now
		}
	}()
	go func() {
		for runCtx.Err() == nil {
			d, err := cons.Receive(runCtx)
			if err != nil {
				continue
			}
			now := time.Now()
			if err := cons.Settle(runCtx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				return
			}
			bq.got <- now
		}
	}()
	one := func(s *side) {
		time.Sleep(idleGap)
		cpu0 := transporttest.ProcessCPU()
		start := time.Now()
		if err := pub.RPush(ctx, s.q, body).Err(); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-s.got:
			s.lat = append(s.lat, at.Sub(start))
		case <-time.After(10 * time.Second):
			b.Fatalf("no message on %s within 10s", s.q)
		}
		s.cpu += transporttest.ProcessCPU() - cpu0
	}
	for range 5 { // warm up: connections, script cache
		one(raw)
		one(bq)
	}
	raw.lat, bq.lat, raw.cpu, bq.cpu = nil, nil, 0, 0
	b.ResetTimer()
	for range b.N {
		one(raw)
		one(bq)
	}
	b.StopTimer()
	stop()
	pct := func(s *side, p float64) float64 {
		l := slices.Clone(s.lat)
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(p*float64(len(l))))].Microseconds())
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(pct(raw, 0.5), "raw-p50-µs")
	b.ReportMetric(pct(raw, 0.99), "raw-p99-µs")
	b.ReportMetric(pct(bq, 0.5), "bq-p50-µs")
	b.ReportMetric(pct(bq, 0.99), "bq-p99-µs")
	b.ReportMetric(pct(bq, 0.5)/pct(raw, 0.5), "bq/raw-p50")
	b.ReportMetric(pct(bq, 0.99)/pct(raw, 0.99), "bq/raw-p99")
	b.ReportMetric(float64(raw.cpu.Microseconds())/float64(b.N), "raw-cpu-µs/msg")
	b.ReportMetric(float64(bq.cpu.Microseconds())/float64(b.N), "bq-cpu-µs/msg")
}
