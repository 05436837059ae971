//go:build unix

package kafka_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkLargeBody is issue 23's large-body figure on Kafka: b.N envelopes of 64 KiB
// published before the clock starts, then consumed with their offsets committed, "raw" by
// a franz-go group consumer that polls and commits each batch (never looking inside a
// record), "runtime" by an app with one worker whose handler reads the message.
// cpu-µs/KiB is the Go process's CPU per KiB of body (the broker is a process of its own);
// heap-MiB and peak-heap-MiB are the median and the largest Go heap (live and not yet
// swept objects) sampled every millisecond from the consumer's start to its end (the
// runtime's side includes the publish before its clock starts).
//
//	CI=true go test -run '^$' -bench LargeBody -benchmem -benchtime 300x -count 3 ./transport/kafka/
func BenchmarkLargeBody(b *testing.B) {
	const kib = 64
	b.Run("raw", func(b *testing.B) {
		q := newTopic(b, "bqbench-large-raw")
		createTopic(b, q, 1)
		bodies := transporttest.LargeBodies(b.N, kib, q)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		pub := rawClient(b, kgo.ProducerBatchMaxBytes(4<<20))
		for _, body := range bodies {
			pub.Produce(ctx, &kgo.Record{Topic: q, Value: body, Headers: rawHeaders()}, nil)
		}
		if err := pub.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		cl := rawClient(b, kgo.ConsumerGroup(transporttest.UniqueName("bqbench")), kgo.ConsumeTopics(q),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		b.ReportAllocs()
		heap := sampleHeap()
		defer heap.report(b)
		b.ResetTimer()
		start := transporttest.ProcessCPU()
		for got := 0; got < len(bodies); {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				b.Fatalf("consumed %d of %d: %v", got, len(bodies), err)
			}
			fs.EachRecord(func(*kgo.Record) { got++ })
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		transporttest.ReportCPUPerKiB(b, start, bodies)
	})
	b.Run("runtime", func(b *testing.B) {
		q := newTopic(b, "bqbench-large-rt")
		createTopic(b, q, 1)
		tr := openKafka(b)
		heap := sampleHeap()
		defer heap.report(b)
		transporttest.BenchRuntimeLargeBody(b, tr, q, transporttest.LargeBodies(b.N, kib, q))
	})
}

// heapSampler reads the Go heap every millisecond until report.
type heapSampler struct {
	stop chan struct{}
	done chan []uint64
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan []uint64)}
	go func() {
		var got []uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			_, _, heap := readHeap()
			got = append(got, heap)
			select {
			case <-h.stop:
				h.done <- got
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// report stops the sampling and reports the median and the largest heap sampled.
func (h *heapSampler) report(b *testing.B) {
	close(h.stop)
	got := <-h.done
	b.ReportMetric(float64(medianOf(got))/(1<<20), "heap-MiB")
	b.ReportMetric(float64(slices.Max(got))/(1<<20), "peak-heap-MiB")
}
