//go:build unix

package kafka_test

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkSteadyLargeBody is issue 39's 64 KiB memory figure in one process: a
// producer paced at 200 records a second writes 64 KiB envelopes while, side by side
// in turns, raw franz-go (a group consumer polling and committing each poll, never
// looking inside a record) and the runtime (one worker, prefetch 10, a handler reading
// the message, as benchmarks/sdkcompare's steady run) consume them. The Go heap (live
// and not yet swept objects) is sampled every 10 ms once the first 2 s have passed;
// each side reports its median and its largest sample, and after a runtime.GC() at
// the end of its turn the heap it still holds. The producer is the same raw client
// for both sides, so its share is the same. b.N is the turns of each side; each turn
// consumes 1000 records (5 s).
//
//	CI=true go test -run '^$' -bench SteadyLargeBody -benchtime 2x ./transport/kafka/
func BenchmarkSteadyLargeBody(b *testing.B) {
	const (
		n    = 1000
		rate = 200
		warm = 2 * time.Second
	)
	bodies := transporttest.LargeBodies(1, 64, "steady")
	pub := rawClient(b)
	produce := func(ctx context.Context, q string) {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for range n {
			pub.Produce(ctx, &kgo.Record{Topic: q, Value: bodies[0], Headers: rawHeaders()}, nil)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}
	type sideHeap struct{ median, peak, held []uint64 }
	// turn runs consume on a new topic while the producer writes n records to it.
	turn := func(into *sideHeap, consume func(ctx context.Context, q string, got *atomic.Int64) (stop func())) {
		q := newTopic(b, "bqbench-steady")
		createTopic(b, q, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var got atomic.Int64
		stop := consume(ctx, q, &got)
		go produce(ctx, q)
		start := time.Now()
		var samples []uint64
		for got.Load() < n {
			if ctx.Err() != nil {
				b.Fatalf("consumed %d of %d", got.Load(), n)
			}
			if time.Since(start) > warm {
				_, _, h := readHeap()
				samples = append(samples, h)
			}
			time.Sleep(10 * time.Millisecond)
		}
		runtime.GC()
		_, _, held := readHeap()
		stop()
		into.median = append(into.median, medianOf(samples))
		into.peak = append(into.peak, slices.Max(samples))
		into.held = append(into.held, held)
	}
	raw := func(ctx context.Context, q string, got *atomic.Int64) func() {
		cl := rawClient(b, kgo.ConsumerGroup(transporttest.UniqueName("bqbench")), kgo.ConsumeTopics(q),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for cctx.Err() == nil {
				fs := cl.PollFetches(cctx)
				fs.EachRecord(func(*kgo.Record) { got.Add(1) })
				_ = cl.CommitUncommittedOffsets(cctx)
			}
		}()
		return func() { cancel(); <-done; cl.Close() }
	}
	sdk := func(ctx context.Context, q string, got *atomic.Int64) func() {
		app, err := babelqueue.New(openKafka(b), babelqueue.WithQueue(q), babelqueue.WithConcurrency(1),
			babelqueue.WithPrefetch(10), babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			b.Fatal(err)
		}
		app.Handle(transporttest.LargeURN, func(_ context.Context, m *babelqueue.Message) error {
			if len(m.Envelope.Data) == 0 {
				b.Error("a large body without data")
			}
			got.Add(1)
			return nil
		})
		rctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- app.Run(rctx) }()
		return func() {
			cancel()
			if err := <-errc; err != nil {
				b.Error(err)
			}
		}
	}
	var rawHeap, sdkHeap sideHeap
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			turn(&rawHeap, raw)
			turn(&sdkHeap, sdk)
		} else {
			turn(&sdkHeap, sdk)
			turn(&rawHeap, raw)
		}
	}
	b.StopTimer()
	mib := func(xs []uint64) float64 { return float64(medianOf(xs)) / (1 << 20) }
	b.ReportMetric(mib(rawHeap.median), "raw-heap-MiB")
	b.ReportMetric(mib(rawHeap.peak), "raw-peak-heap-MiB")
	b.ReportMetric(mib(rawHeap.held), "raw-held-MiB")
	b.ReportMetric(mib(sdkHeap.median), "sdk-heap-MiB")
	b.ReportMetric(mib(sdkHeap.peak), "sdk-peak-heap-MiB")
	b.ReportMetric(mib(sdkHeap.held), "sdk-held-MiB")
}
