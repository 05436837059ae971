package amqp

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
)

// BenchmarkPublishConfirmedBatch: batches of 100 persistent messages, raw amqp091-go
// (every publish in flight on one confirm-mode channel, then every confirm awaited) in
// turns with the transport's PublishConfirmed, on the same broker in the same run.
// vs-base is raw time over transport time.
func BenchmarkPublishConfirmedBatch(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	rq, tq := newQueue(b), newQueue(b)
	ch := rawConfirmChannel(b, rq)
	tr := openT(b)
	msgs := make([]*transport.Message, batch)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: tq, Body: benchBody, Projection: benchProjection}
	}
	dcs := make([]*amqp091.DeferredConfirmation, batch)
	b.ReportAllocs()
	benchpair.Run(b, batch, func() error {
		for i := range dcs {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", rq, false, false, rawPublishing())
			if err != nil {
				return err
			}
			dcs[i] = dc
		}
		for _, dc := range dcs {
			if _, err := dc.WaitContext(ctx); err != nil {
				return err
			}
		}
		return nil
	}, func() error { return tr.PublishConfirmed(ctx, msgs) })
}
