package dlq_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

const benchDLQ = 1000

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// benchSeed returns a memory broker holding benchDLQ dead letters, all envelopes (the
// runtime's App.Redrive, the baseline, leaves poison on the queue).
func benchSeed(b *testing.B, s dlqtest.Seed) *memory.Transport {
	tr := memory.New()
	for _, it := range s.Items {
		if it.Poison {
			continue
		}
		if err := tr.Publish(context.Background(), it.Message); err != nil {
			b.Fatal(err)
		}
	}
	return tr
}

// BenchmarkRedrive moves a dead-letter queue of envelopes back to work: the dlq
// package (which browses the queue first to know when it is done) beside the
// runtime's App.Redrive, the baseline, which only consumes.
func BenchmarkRedrive(b *testing.B) {
	s := dlqtest.Mixed("orders", "orders.dlq", benchDLQ*10/8, time.Now())
	n := 0
	for _, it := range s.Items {
		if !it.Poison {
			n++
		}
	}
	run := func(b *testing.B, redrive func(*memory.Transport) int) {
		for b.Loop() {
			b.StopTimer()
			tr := benchSeed(b, s)
			b.StartTimer()
			if got := redrive(tr); got != n {
				b.Fatalf("moved %d of %d", got, n)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("dlq.Redrive", func(b *testing.B) {
		run(b, func(tr *memory.Transport) int {
			res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithIdle(20*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			return res.Moved
		})
	})
	b.Run("App.Redrive", func(b *testing.B) {
		run(b, func(tr *memory.Transport) int {
			app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithLogger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			res, err := app.Redrive(context.Background(), 0, 200*time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			return res.Moved
		})
	})
}

// BenchmarkCollect counts a dead-letter queue of 1,000 mixed messages by browsing it.
func BenchmarkCollect(b *testing.B) {
	tr := memory.New()
	for _, m := range dlqtest.Mixed("orders", "orders.dlq", benchDLQ, time.Now()).Messages() {
		if err := tr.Publish(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		st, err := dlq.Collect(context.Background(), tr, "orders.dlq", nil)
		if err != nil || st.Total != benchDLQ {
			b.Fatal(st.Total, err)
		}
	}
	b.ReportMetric(float64(benchDLQ*b.N)/b.Elapsed().Seconds(), "msgs/s")
}
