package pulsar_test

import (
	"context"
	"testing"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkPublishConfirmedBatch: batches of 100 messages, raw pulsar-client-go (every
// SendAsync in flight, a flush, then every receipt awaited) in turns with the
// transport's PublishConfirmed, the same producer settings (no batching), on the same
// broker in the same run. vs-base is raw time over transport time.
func BenchmarkPublishConfirmedBatch(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	p := rawProducer(b, rawClient(b), transporttest.UniqueName("bqbench-raw-batch"))
	tr := openTransport(b, "")
	q := transporttest.UniqueName("bqbench-tr-batch")
	msgs := make([]*transport.Message, batch)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: q, Body: benchBody, Projection: benchMsg}
	}
	b.ReportAllocs()
	benchpair.Run(b, batch, func() error {
		var cbs benchpair.Callbacks
		cbs.Add(batch)
		for range batch {
			p.SendAsync(ctx, &pc.ProducerMessage{Payload: benchBody, Properties: benchProps},
				func(_ pc.MessageID, _ *pc.ProducerMessage, err error) { cbs.Done(err) })
		}
		if err := p.FlushWithCtx(ctx); err != nil {
			return err
		}
		return cbs.Wait()
	}, func() error { return tr.PublishConfirmed(ctx, msgs) })
}
