package console

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// BenchmarkIndex reads a dead-letter queue of 10,000 messages on memory:// into the
// console's index: the first read (every message decoded) and a read again (every
// message known).
func BenchmarkIndex(b *testing.B) {
	tr := memory.New()
	s := dlqtest.Mixed("orders", "orders.dlq", 10_000, time.Now())
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
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			ix.snap = nil
			if _, err := ix.build(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/msg")
	})
	snap, err := ix.build(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("again", func(b *testing.B) {
		for b.Loop() {
			ix.snap = snap
			if _, err := ix.build(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/msg")
	})
}
