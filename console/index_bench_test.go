package console

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// BenchmarkIndex reads a dead-letter queue of 10,000 mixed dead letters on memory://
// (no network: what is measured is the console's own work) three ways in one run:
// dlq.Collect, the dlq package's grouping of the same queue (the baseline), the
// console's first read (every message decoded, grouped, kept as a row without its
// body) and a read again (every message browsed and hashed, none decoded again).
func BenchmarkIndex(b *testing.B) {
	const n = 10_000
	tr := memory.New()
	s := dlqtest.Mixed("orders", "orders.dlq", n, time.Now())
	for _, m := range s.Messages() {
		if err := tr.Publish(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
	c, err := New([]Broker{{Transport: tr, Queues: []Queue{{Name: "orders"}}}}, WithoutPrewarm(), WithSampleInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ix := c.indexOf(c.brokers[0], "orders.dlq")
	perMsg := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/msg")
	}
	b.Run("baseline=dlq.Collect", func(b *testing.B) {
		for b.Loop() {
			if st, err := dlq.Collect(context.Background(), tr, "orders.dlq", nil); err != nil || st.Total != n {
				b.Fatal(st.Total, err)
			}
		}
		perMsg(b)
	})
	b.Run("first-read", func(b *testing.B) {
		for b.Loop() {
			ix.snap = nil
			if s, err := ix.build(context.Background()); err != nil || len(s.entries) != n {
				b.Fatal(err)
			}
		}
		perMsg(b)
	})
	snap, err := ix.build(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("read-again", func(b *testing.B) {
		for b.Loop() {
			ix.snap = snap
			if s, err := ix.build(context.Background()); err != nil || len(s.entries) != n {
				b.Fatal(err)
			}
		}
		perMsg(b)
	})
}
