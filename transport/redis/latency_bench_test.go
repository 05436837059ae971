package redis_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkIdleLatency is issue 39's idle-queue latency: one consumer waits on an empty
// queue, a message is pushed (RPUSH by a client of its own, the same for both sides),
// and the clock stops when the consumer has it in hand; the consumer then acknowledges
// it (outside the clock) and the next message comes idleGap after that, so that every message finds the
// consumer waiting. "raw" is go-redis blocked in BLMOVE into a processing list (then
// LREM); "bq" is the transport's consumer (Receive, then Settle(Ack), prefetch 1); "lua"
// is the floor of any consumer that reserves in a script: go-redis sending the same
// blocking look as the transport with a one-command script behind it (LMOVE into the
// processing list), then LREM. The sides take turns message by message, so all see the
// same load on this shared machine. "layout" is the floor of the family's layout, the
// one the Python SDK shares: the same look with the layout's minimal reserve script
// behind it (LMOVE and the ZADD of the deadline member), then its gated settle script
// (layoutReserve, layoutSettle): what any consumer keeping that layout makes Redis do.
// "script" is go-redis sending the same look with the script the transport sends behind
// its look (reserveWoken: the layout's LMOVE and ZADD, and the list's length for the
// next look-first), then the layout's settle script: script/layout is what the
// transport's script adds to the floor, bq/script what the rest of the transport (the
// driver kit, the delivery) adds. It reports each side's p50 and p99 in µs, the ratios
// to raw and bq's to the layout floor, each side's client CPU per message (publisher
// included, the same on all), and bq-client: the p50 time from the answer to the
// transport's round trip (a go-redis hook) to Receive's return.
//
//	CI=true go test -run '^$' -bench IdleLatency -benchtime 400x ./transport/redis/
func BenchmarkIdleLatency(b *testing.B) {
	const idleGap = 3 * time.Millisecond
	ctx := context.Background()
	c := client(b)
	pub := client(b)
	rq, tq, lq := transporttest.UniqueName("bqbench-idle"), transporttest.UniqueName("bqbench-idle"), transporttest.UniqueName("bqbench-idle")
	yq, sq := transporttest.UniqueName("bqbench-idle"), transporttest.UniqueName("bqbench-idle")
	for _, q := range []string{rq, tq, lq, yq, sq} {
		cleanKeys(b, c, q+"*")
	}
	tr, err := transport.Open(ctx, brokerURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(ctx)
	answered := &answerClock{}
	tr.(*bqredis.Transport).Client().AddHook(answered)
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
	var clientMu sync.Mutex
	var bqClient []time.Duration // from the answer to the transport's round trip to Receive's return
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	raw := &side{q: rq, got: make(chan time.Time, 1)}
	bq := &side{q: tq, got: make(chan time.Time, 1)}
	lua := &side{q: lq, got: make(chan time.Time, 1)}
	layout := &side{q: yq, got: make(chan time.Time, 1)}
	script := &side{q: sq, got: make(chan time.Time, 1)}
	for _, s := range []*goredis.Script{luaMove, layoutReserve, layoutSettle, bqredis.ReserveWokenForTest} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	go func() {
		ykeys := layoutKeys(yq)
		for runCtx.Err() == nil {
			tok := layoutToken()
			p := c.Pipeline()
			p.Do(runCtx, "blmove", yq, yq, "LEFT", "LEFT", "1")
			moved := p.EvalSha(runCtx, layoutReserve.Hash(), ykeys, layoutDeadline(), tok)
			_, _ = p.Exec(runCtx)
			el, err := moved.Text()
			if errors.Is(err, goredis.Nil) {
				continue
			}
			if err != nil {
				return
			}
			now := time.Now()
			if err := layoutSettle.EvalSha(runCtx, c, ykeys[1:], tok, el).Err(); err != nil {
				return
			}
			layout.got <- now
		}
	}()
	go func() {
		for runCtx.Err() == nil {
			p := c.Pipeline()
			p.Do(runCtx, "blmove", lq, lq, "LEFT", "LEFT", "1")
			moved := p.EvalSha(runCtx, luaMove.Hash(), []string{lq, lq + ":processing"})
			_, _ = p.Exec(runCtx)
			el, err := moved.Text()
			if errors.Is(err, goredis.Nil) {
				continue
			}
			if err != nil {
				return
			}
			now := time.Now()
			if err := c.LRem(runCtx, lq+":processing", 1, el).Err(); err != nil {
				return
			}
			lua.got <- now
		}
	}()
	go func() {
		skeys := layoutKeys(sq)
		for runCtx.Err() == nil {
			tok := layoutToken()
			p := c.Pipeline()
			p.Do(runCtx, "blmove", sq, sq, "LEFT", "LEFT", "1")
			moved := p.EvalSha(runCtx, bqredis.ReserveWokenForTest.Hash(), skeys, layoutDeadline(), tok)
			_, _ = p.Exec(runCtx)
			out, err := moved.Slice()
			if err != nil {
				return
			}
			if len(out) < 2 {
				continue
			}
			el, _ := out[0].(string)
			at := time.Now()
			if err := layoutSettle.EvalSha(runCtx, c, skeys[1:], tok, el).Err(); err != nil {
				return
			}
			script.got <- at
		}
	}()
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
			clientMu.Lock()
			bqClient = append(bqClient, now.Sub(time.Unix(0, answered.at.Load())))
			clientMu.Unlock()
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
		one(lua)
		one(layout)
		one(script)
	}
	for _, s := range []*side{raw, bq, lua, layout, script} {
		s.lat, s.cpu = nil, 0
	}
	clientMu.Lock()
	bqClient = bqClient[:0]
	clientMu.Unlock()
	b.ResetTimer()
	for range b.N {
		one(raw)
		one(bq)
		one(lua)
		one(layout)
		one(script)
	}
	b.StopTimer()
	stop()
	pctOf := func(l []time.Duration, p float64) float64 {
		l = slices.Clone(l)
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(p*float64(len(l))))].Nanoseconds()) / 1e3
	}
	pct := func(s *side, p float64) float64 { return pctOf(s.lat, p) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(pct(raw, 0.5), "raw-p50-µs")
	b.ReportMetric(pct(raw, 0.99), "raw-p99-µs")
	b.ReportMetric(pct(bq, 0.5), "bq-p50-µs")
	b.ReportMetric(pct(bq, 0.99), "bq-p99-µs")
	b.ReportMetric(pct(bq, 0.5)/pct(raw, 0.5), "bq/raw-p50")
	b.ReportMetric(pct(bq, 0.99)/pct(raw, 0.99), "bq/raw-p99")
	b.ReportMetric(pct(lua, 0.5)/pct(raw, 0.5), "lua/raw-p50")
	b.ReportMetric(pct(lua, 0.99)/pct(raw, 0.99), "lua/raw-p99")
	b.ReportMetric(pct(layout, 0.5)/pct(raw, 0.5), "layout/raw-p50")
	b.ReportMetric(pct(layout, 0.99)/pct(raw, 0.99), "layout/raw-p99")
	b.ReportMetric(pct(bq, 0.5)/pct(layout, 0.5), "bq/layout-p50")
	b.ReportMetric(pct(bq, 0.99)/pct(layout, 0.99), "bq/layout-p99")
	b.ReportMetric(pct(script, 0.5)/pct(layout, 0.5), "script/layout-p50")
	b.ReportMetric(pct(bq, 0.5)/pct(script, 0.5), "bq/script-p50")
	clientMu.Lock()
	b.ReportMetric(pctOf(bqClient, 0.5), "bq-client-p50-µs")
	clientMu.Unlock()
	b.ReportMetric(float64(raw.cpu.Microseconds())/float64(b.N), "raw-cpu-µs/msg")
	b.ReportMetric(float64(bq.cpu.Microseconds())/float64(b.N), "bq-cpu-µs/msg")
	b.ReportMetric(float64(lua.cpu.Microseconds())/float64(b.N), "lua-cpu-µs/msg")
	b.ReportMetric(float64(layout.cpu.Microseconds())/float64(b.N), "layout-cpu-µs/msg")
	b.ReportMetric(float64(script.cpu.Microseconds())/float64(b.N), "script-cpu-µs/msg")
}

// answerClock is a go-redis hook that keeps when the last pipeline was answered.
type answerClock struct{ at atomic.Int64 }

func (h *answerClock) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h *answerClock) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h *answerClock) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		h.at.Store(time.Now().UnixNano())
		return err
	}
}
