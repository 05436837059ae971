package dlq_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
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

// benchMixed returns a memory broker holding benchDLQ mixed dead letters.
func benchMixed(b *testing.B, s dlqtest.Seed) *memory.Transport {
	tr := memory.New()
	for _, m := range s.Messages() {
		if err := tr.Publish(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
	return tr
}

// BenchmarkPurge removes the half of a mixed dead-letter queue of 1,000 that is not
// reason=failed (every other message, so the other half is written back on the way),
// with and without an archive, beside dlq.Redrive moving the same half back to work.
func BenchmarkPurge(b *testing.B) {
	s := dlqtest.Mixed("orders", "orders.dlq", benchDLQ, time.Now())
	sel, err := dlq.ParseSelect([]string{"reason!=failed"}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	want := 0
	for _, it := range s.Items {
		if it.Reason != "failed" {
			want++
		}
	}
	run := func(b *testing.B, op func(*memory.Transport) int) {
		for b.Loop() {
			b.StopTimer()
			tr := benchMixed(b, s)
			b.StartTimer()
			if got := op(tr); got != want {
				b.Fatalf("took %d of %d", got, want)
			}
		}
		b.ReportMetric(float64(want*b.N)/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("Purge", func(b *testing.B) {
		run(b, func(tr *memory.Transport) int {
			res, err := dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel))
			if err != nil {
				b.Fatal(err)
			}
			return res.Removed
		})
	})
	b.Run("Purge+export", func(b *testing.B) {
		run(b, func(tr *memory.Transport) int {
			res, err := dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithExport(dlq.NewWriter(io.Discard)))
			if err != nil {
				b.Fatal(err)
			}
			return res.Removed
		})
	})
	b.Run("Redrive(baseline)", func(b *testing.B) {
		run(b, func(tr *memory.Transport) int {
			res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithPoison(), dlq.WithTarget("orders"))
			if err != nil {
				b.Fatal(err)
			}
			return res.Moved
		})
	})
}

// BenchmarkExportImport writes a mixed dead-letter queue of 1,000 to an export and an
// export of 1,000 back, beside what each is built on: Collect (a browse that reads
// every entry) and a confirmed publish of the same messages.
func BenchmarkExportImport(b *testing.B) {
	s := dlqtest.Mixed("orders", "orders.dlq", benchDLQ, time.Now())
	tr := benchMixed(b, s)
	var archive bytes.Buffer
	if _, err := dlq.Export(context.Background(), tr, "orders.dlq", dlq.NewWriter(&archive)); err != nil {
		b.Fatal(err)
	}
	b.Run("Export", func(b *testing.B) {
		for b.Loop() {
			res, err := dlq.Export(context.Background(), tr, "orders.dlq", dlq.NewWriter(io.Discard))
			if err != nil || res.Exported != benchDLQ {
				b.Fatal(res.Exported, err)
			}
		}
		b.ReportMetric(float64(benchDLQ*b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("Collect(baseline)", func(b *testing.B) {
		for b.Loop() {
			if st, err := dlq.Collect(context.Background(), tr, "orders.dlq", nil); err != nil || st.Total != benchDLQ {
				b.Fatal(st.Total, err)
			}
		}
		b.ReportMetric(float64(benchDLQ*b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("Import", func(b *testing.B) {
		for b.Loop() {
			dst := memory.New()
			res, err := dlq.Import(context.Background(), dst, dlq.NewReader(bytes.NewReader(archive.Bytes())))
			if err != nil || res.Imported != benchDLQ {
				b.Fatal(res.Imported, err)
			}
		}
		b.ReportMetric(float64(benchDLQ*b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("PublishConfirmed(baseline)", func(b *testing.B) {
		ms := s.Messages()
		for b.Loop() {
			dst := memory.New()
			for i := 0; i < len(ms); i += 100 {
				if err := transport.PublishConfirmed(context.Background(), dst, ms[i:i+100]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(benchDLQ*b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}
