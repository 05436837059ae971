package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

// rawOp is one message's life through go-redis on queue q: RPUSH, BLMOVE into
// q:processing, LREM.
func rawOp(b *testing.B, c *goredis.Client, q string, body []byte) func() {
	ctx := context.Background()
	return func() {
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
	}
}

// transportOp is one message's life through the transport on queue q: Publish, Receive,
// Settle(Ack).
func transportOp(b *testing.B, tr transport.Transport, cons transport.Consumer, q string, body []byte) func() {
	ctx := context.Background()
	return func() {
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
	}
}

// BenchmarkRaw is go-redis doing the same commands, one message at a time per worker.
func BenchmarkRaw(b *testing.B) {
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) {
			c := client(b)
			q := transporttest.UniqueName("bqbench")
			cleanKeys(b, c, q+"*")
			body := envelope("bench")
			b.ReportAllocs()
			b.ResetTimer()
			split(b, w.n, rawOp(b, c, q, body))
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
			tr := newTransport(b, c)
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: w.n})
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close(ctx)
			body := envelope("bench")
			b.ReportAllocs()
			b.ResetTimer()
			split(b, w.n, transportOp(b, tr, cons, q, body))
		})
	}
}

// BenchmarkPaired interleaves the sides: chunks of pairedChunk messages go through raw
// go-redis, then through the transport, then through a "lua floor" — RPUSH, then BLMOVE
// and LREM each replaced by a one-command Lua script (EVALSHA of LMOVE, of LREM) — for
// b.N messages each, so all sides see the same machine load (this machine is shared). It
// reports each side's ns per message and the ratios raw/transport and raw/lua (above 1:
// faster than raw). The lua floor is what any design pays that reserves and settles in
// scripts (as crash recovery and the settle gate need), before doing anything in them.
func BenchmarkPaired(b *testing.B) {
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) { paired(b, w.n, envelope("bench")) })
	}
}

// BenchmarkPairedLargeBody is BenchmarkPaired with 64 KiB envelopes (issue 23's large
// bodies): what the shared layout costs per byte (the deadline member holds the body
// beside the element, so each reservation writes it twice in Redis).
func BenchmarkPairedLargeBody(b *testing.B) {
	body := envelope(strings.Repeat("x", 64<<10-250))
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) { paired(b, w.n, body) })
	}
}

// paired is one run of BenchmarkPaired with n workers and body.
func paired(b *testing.B, n int, body []byte) {
	const pairedChunk = 256
	c := client(b)
	ctx := context.Background()
	rq := transporttest.UniqueName("bqbench")
	tq := transporttest.UniqueName("bqbench")
	dq := transporttest.UniqueName("bqbench")
	lq := transporttest.UniqueName("bqbench")
	for _, q := range []string{rq, tq, dq, lq} {
		cleanKeys(b, c, q+"*")
	}
	tr := newTransport(b, c)
	cons, err := tr.Consume(ctx, tq, transport.ConsumeOptions{Prefetch: n})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close(ctx)
	dtr := newTransport(b, c, bqredis.WithDeferredAcks(2*time.Millisecond))
	dcons, err := dtr.Consume(ctx, dq, transport.ConsumeOptions{Prefetch: n})
	if err != nil {
		b.Fatal(err)
	}
	defer dcons.Close(ctx)
	raw := rawOp(b, c, rq, body)
	bq := transportOp(b, tr, cons, tq, body)
	bqd := transportOp(b, dtr, dcons, dq, body)
	lkeys := []string{lq, lq + ":processing"}
	lua := func() {
		if err := c.RPush(ctx, lq, body).Err(); err != nil {
			b.Error(err)
			return
		}
		el, err := luaMove.Run(ctx, c, lkeys).Text()
		if err != nil {
			b.Error(err)
			return
		}
		if err := luaRem.Run(ctx, c, lkeys[1:], el).Err(); err != nil {
			b.Error(err)
		}
	}
	var rawT, bqT, bqdT, luaT time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += pairedChunk {
		k := min(pairedChunk, b.N-done)
		start := time.Now()
		splitN(k, n, raw)
		rawT += time.Since(start)
		start = time.Now()
		splitN(k, n, bq)
		bqT += time.Since(start)
		start = time.Now()
		splitN(k, n, bqd)
		bqdT += time.Since(start)
		start = time.Now()
		splitN(k, n, lua)
		luaT += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(rawT.Nanoseconds())/float64(b.N), "raw-ns/msg")
	b.ReportMetric(float64(bqT.Nanoseconds())/float64(b.N), "bq-ns/msg")
	b.ReportMetric(float64(bqdT.Nanoseconds())/float64(b.N), "bqd-ns/msg")
	b.ReportMetric(float64(luaT.Nanoseconds())/float64(b.N), "lua-ns/msg")
	b.ReportMetric(float64(rawT)/float64(bqT), "raw/bq")
	b.ReportMetric(float64(rawT)/float64(bqdT), "raw/bqd")
	b.ReportMetric(float64(rawT)/float64(luaT), "raw/lua")
}

// The lua floor's scripts: BLMOVE's and LREM's work, one command each.
var (
	luaMove = goredis.NewScript(`return redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')`)
	luaRem  = goredis.NewScript(`return redis.call('lrem', KEYS[1], 1, ARGV[1])`)
)

// The floor of the family's layout (the one the Python SDK shares): what any consumer
// keeping it must make Redis do, and nothing more. A reservation is the element moved to
// "<q>:processing" and its deadline member "<token>:<element>" in
// "<q>:processing:deadlines", recorded together in one script (a consumer that died
// between two commands would strand the message); a settle removes the member, and the
// element only when the member was still there (the gate), in one script.
//
//	layoutReserve: KEYS ready, processing, deadlines; ARGV deadline score, token
//	layoutSettle:  KEYS processing, deadlines; ARGV token, element
var (
	layoutReserve = goredis.NewScript(`
local raw = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
if raw then redis.call('zadd', KEYS[3], ARGV[1], ARGV[2] .. ':' .. raw) end
return raw`)
	layoutSettle = goredis.NewScript(`
if redis.call('zrem', KEYS[2], ARGV[1] .. ':' .. ARGV[2]) == 1 then
  return redis.call('lrem', KEYS[1], 1, ARGV[2])
end
return 0`)
)

// layoutKeys are the keys of layoutReserve for queue q (layoutSettle takes [1:]).
func layoutKeys(q string) []string {
	return []string{q, q + ":processing", q + ":processing:deadlines"}
}

// layoutToken is a reservation token of the layout: 32 lowercase hex characters.
func layoutToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// layoutDeadline is the deadline score of a reservation made now (retry_after 60 s).
func layoutDeadline() string {
	return strconv.FormatFloat(float64(time.Now().Add(time.Minute).UnixMicro())/1e6, 'f', 6, 64)
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
