//go:build unix

package redis_test

import (
	"context"
	"testing"
	"unsafe"

	bqenvelope "github.com/babelqueue-go/babelqueue/envelope"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkLargeBody is issue 23's large-body figure on Redis: b.N envelopes of 64 KiB
// pushed before the clock starts, then consumed, "raw" by go-redis doing what a careful
// list consumer does (BLMOVE into a processing list, LREM once handled; it never looks
// inside a body), "raw+decode" by the same loop that also decodes each envelope with
// envelope.Decode, reading go-redis's reply in place (no copy: a floor no consumer that
// checks the envelope, as SPEC.md requires, can go under), "runtime" by an app with one
// worker whose handler reads the message.
// cpu-µs/KiB is the Go process's CPU per KiB of body (redis-server is a process of its
// own).
//
//	CI=true go test -run '^$' -bench LargeBody -benchmem -benchtime 300x -count 3 ./transport/redis/
func BenchmarkLargeBody(b *testing.B) {
	const kib = 64
	b.Run("raw", func(b *testing.B) { rawLargeBody(b, kib, false) })
	b.Run("raw+decode", func(b *testing.B) { rawLargeBody(b, kib, true) })
	b.Run("runtime", func(b *testing.B) {
		c := client(b)
		q := transporttest.UniqueName("bqbench-large")
		cleanKeys(b, c, q+"*")
		transporttest.BenchRuntimeLargeBody(b, newTransport(b, c), q, transporttest.LargeBodies(b.N, kib, q))
	})
}

// rawLargeBody is BenchmarkLargeBody's raw go-redis consumer: BLMOVE, then LREM; with
// decode it also decodes each envelope, straight from the reply.
func rawLargeBody(b *testing.B, kib int, decode bool) {
	c := client(b)
	ctx := context.Background()
	q := transporttest.UniqueName("bqbench-large")
	cleanKeys(b, c, q+"*")
	bodies := transporttest.LargeBodies(b.N, kib, q)
	for _, body := range bodies {
		if err := c.RPush(ctx, q, body).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := transporttest.ProcessCPU()
	for range bodies {
		el, err := c.BLMove(ctx, q, q+":processing", "LEFT", "RIGHT", 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		if decode {
			if _, err := bqenvelope.Decode(unsafe.Slice(unsafe.StringData(el), len(el))); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.LRem(ctx, q+":processing", 1, el).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	transporttest.ReportCPUPerKiB(b, start, bodies)
}
