package main

import (
	"context"
	"os"
	"testing"

	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkTake is the cost of one look at a queue and its dead-letter queue
// (queuestats.Take: what the console, `babelqueue stats` and a QueueCollector pay per
// queue per interval) on each real broker, each queue holding 100 messages, against
// memory:// as the baseline.
func BenchmarkTake(b *testing.B) {
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		b.Setenv("AWS_ACCESS_KEY_ID", "x")
		b.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	}
	run := func(b *testing.B, tr transport.Transport, q queuestats.Queue) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := queuestats.Take(ctx, tr, q); err != nil {
				b.Fatal(err)
			}
		}
	}
	seedQueue := func(b *testing.B, tr transport.Transport, queue string) {
		ms := make([]*transport.Message, 100)
		for i := range ms {
			ms[i] = oldEnvelope(b, queue, i)
		}
		if err := transport.PublishConfirmed(context.Background(), tr, ms); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("memory", func(b *testing.B) {
		tr := memory.New()
		seedQueue(b, tr, "orders")
		run(b, tr, queuestats.Queue{Name: "orders"})
	})
	for _, ob := range opsBrokers() {
		b.Run(ob.name, func(b *testing.B) {
			raw := transporttest.BrokerURL(b, ob.env, ob.service)
			tr, err := transport.Open(context.Background(), raw)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close(context.Background())
			q := transporttest.UniqueName("bqbench")
			seedQueue(b, tr, q)
			run(b, tr, queuestats.Queue{Name: q})
		})
	}
}
