package artemis_test

import (
	"context"
	"testing"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
)

// BenchmarkPublishConfirmedBatch: batches of 100 confirmed writes, raw go-amqp (every
// transfer in flight, then every outcome awaited) in turns with the transport's
// PublishConfirmed, on the same broker in the same run. vs-base is raw time over
// transport time.
func BenchmarkPublishConfirmedBatch(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	s := rawSender(b, benchQueue(b, "bqbench-rawbatch"))
	tr := openTransport(b)
	q := benchQueue(b, "bqbench-trbatch")
	msgs := make([]*transport.Message, batch)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}
	}
	receipts := make([]amqp.SendReceipt, batch)
	b.ReportAllocs()
	benchpair.Run(b, batch, func() error {
		for i := range receipts {
			r, err := s.SendWithReceipt(ctx, rawMessage(), nil)
			if err != nil {
				return err
			}
			receipts[i] = r
		}
		for _, r := range receipts {
			if _, err := r.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}, func() error { return tr.PublishConfirmed(ctx, msgs) })
}
