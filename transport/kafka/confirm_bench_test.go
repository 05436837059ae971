package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
)

// BenchmarkPublishConfirmedBatch: batches of 100 records, raw franz-go (every record
// produced with a promise, then Flush, then every promise awaited) in turns with the
// transport's PublishConfirmed, on the same broker in the same run. vs-base is raw time
// over transport time.
func BenchmarkPublishConfirmedBatch(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	cl := rawClient(b, kgo.AllowAutoTopicCreation())
	tr := openKafka(b)
	qr, qt := newTopic(b, "bqbench-confraw"), newTopic(b, "bqbench-conftr")
	createTopic(b, qr, 1)
	createTopic(b, qt, 1)
	msgs := make([]*transport.Message, batch)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: qt, Body: benchBody, Projection: benchProjection}
	}
	b.ReportAllocs()
	benchpair.Run(b, batch, func() error {
		var cbs benchpair.Callbacks
		cbs.Add(batch)
		for range batch {
			cl.Produce(ctx, rawRecord(qr), func(_ *kgo.Record, err error) { cbs.Done(err) })
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		return cbs.Wait()
	}, func() error { return tr.PublishConfirmed(ctx, msgs) })
}
