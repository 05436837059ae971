package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
)

// settleCounter counts the app's settlements and the messages finished (handled, or
// dead-lettered).
type settleCounter struct {
	settled, finished atomic.Int64
}

func (s *settleCounter) OnSettled(_ context.Context, ev babelqueue.SettledEvent) {
	if ev.Err != nil {
		return
	}
	s.settled.Add(1)
	if ev.Action == babelqueue.ActionAck || ev.Action == babelqueue.ActionDeadLetter {
		s.finished.Add(1)
	}
}

// runtimeTurn fills a new topic with n messages (every second one failing when
// halfFail), then runs an app on tr over it with 8 workers and a prefetch of 80 (as
// benchmarks/sdkcompare does) until every message is finished (handled, or retried
// twice and dead-lettered: max attempts 3, DLQ on), and returns the settlements made
// and the time they took from the first receive.
func runtimeTurn(b *testing.B, tr *kafka.Transport, n int, partitions int32, halfFail bool) (int64, time.Duration) {
	b.Helper()
	q := newTopic(b, "bqbench-rt")
	createTopic(b, q, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const okURN, failURN = "urn:babel:bench:ok", "urn:babel:bench:fail"
	count := &settleCounter{}
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithConcurrency(8),
		babelqueue.WithPrefetch(80), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3),
		babelqueue.WithObserver(count), babelqueue.WithLogger(brokerproc.TestLogger(b, slog.LevelError+1)))
	if err != nil {
		b.Fatal(err)
	}
	type payload struct {
		N int `json:"n"`
	}
	var first atomic.Int64
	mark := func() {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
	}
	babelqueue.Handle(a, okURN, func(context.Context, payload, *babelqueue.Message) error { mark(); return nil })
	refused := errors.New("refused")
	babelqueue.Handle(a, failURN, func(context.Context, payload, *babelqueue.Message) error { mark(); return refused })
	for i := range n {
		urn := okURN
		if halfFail && i%2 == 1 {
			urn = failURN
		}
		if _, err := a.Publish(ctx, urn, payload{N: i}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	for count.finished.Load() < int64(n) {
		if ctx.Err() != nil {
			b.Fatalf("finished %d of %d messages", count.finished.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(time.Unix(0, first.Load()))
	settled := count.settled.Load()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return settled, took
}

// BenchmarkRuntimeHalfFailing runs the runtime on Kafka over b.N messages in three
// turns, timed from the first handler call until every message is finished: every
// handler succeeding, then every second handler failing (retried twice, then
// dead-lettered) with pipelined settle writes (the default), then the same with
// settle writes each worker waits for (pipeline_settles=0). It reports settlements
// (deliveries settled) and messages finished per second of each turn, and each
// half-failing turn's settlements per second over the all-success turn's (a failing
// message takes three deliveries, so two per message on average). Each turn runs on a
// topic filled for it, in one process, so the figures are comparable; the three turns
// run on topics of one partition, then of eight (as benchmarks/sdkcompare makes them).
func BenchmarkRuntimeHalfFailing(b *testing.B) {
	brokerURL(b)
	turns := []struct {
		name     string
		halfFail bool
		params   []string
	}{
		{"all-success", false, nil},
		{"half-failing-pipelined", true, nil},
		{"half-failing-awaited", true, []string{"pipeline_settles", "0"}},
	}
	for _, partitions := range []int32{1, 8} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			var total time.Duration
			var base float64
			for _, turn := range turns {
				tr := openKafka(b, turn.params...)
				settled, took := runtimeTurn(b, tr, b.N, partitions, turn.halfFail)
				total += took
				rate := float64(settled) / took.Seconds()
				b.ReportMetric(rate, turn.name+"-settled/s")
				b.ReportMetric(float64(b.N)/took.Seconds(), turn.name+"-finished/s")
				if base == 0 {
					base = rate
				} else {
					b.ReportMetric(rate/base, turn.name+"-settled-ratio")
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
		})
	}
}
