package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
)

// BenchmarkWait: what wait=1 costs (WAIT for one replica after the write, on the same
// connection), timed in turns with the same work without it, on the same set in the same
// run (benchpair): a confirmed publish, a batch of 100, and a publish + reserve + ack
// (the ack's settle script then waits). vs-base is the plain time over the waited time.
func BenchmarkWait(b *testing.B) {
	for _, set := range []struct{ name, url string }{
		{"sentinel", sentinelURL(b)},
		{"cluster", clusterURL(b)},
	} {
		open := func(b *testing.B, query string) transport.Transport {
			tr, err := transport.Open(context.Background(), set.url+query)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tr.Close(context.Background()) })
			return tr
		}
		b.Run(set.name, func(b *testing.B) {
			plain, waited := open(b, ""), open(b, "&wait=1&wait_timeout=1s")
			q := tagged("bqbench-wait")
			body := envelope("bench")
			msg := &transport.Message{Queue: q, Body: body}
			ctx := context.Background()
			b.Cleanup(func() { plain.(*bqredis.Transport).Client().Del(ctx, q) })
			b.Run("publish", func(b *testing.B) {
				benchpair.Run(b, 1, func() error { return plain.Publish(ctx, msg) }, func() error { return waited.Publish(ctx, msg) })
			})
			b.Run("batch100", func(b *testing.B) {
				// Each side its own queue, emptied every 20th batch (both alike) so that the
				// sets' maxmemory (128 MB) holds the run.
				batch := func(tr transport.Transport) func() error {
					q := tagged("bqbench-wait")
					msgs := make([]*transport.Message, 100)
					for i := range msgs {
						msgs[i] = &transport.Message{Queue: q, Body: body}
					}
					n := 0
					b.Cleanup(func() { tr.(*bqredis.Transport).Client().Del(ctx, q) })
					return func() error {
						if n++; n%20 == 0 {
							tr.(*bqredis.Transport).Client().Del(ctx, q)
						}
						return tr.(transport.ConfirmedPublisher).PublishConfirmed(ctx, msgs)
					}
				}
				benchpair.Run(b, 100, batch(plain), batch(waited))
			})
			b.Run("publish-receive-ack", func(b *testing.B) {
				cycle := func(tr transport.Transport, q string) func() error {
					c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = c.Close(context.Background()) })
					m := &transport.Message{Queue: q, Body: body}
					return func() error {
						if err := tr.Publish(ctx, m); err != nil {
							return err
						}
						rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
						d, err := c.Receive(rctx)
						if err != nil {
							return err
						}
						return c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
					}
				}
				qp, qw := tagged("bqbench-wait"), tagged("bqbench-wait")
				b.Cleanup(func() { plain.(*bqredis.Transport).Client().Del(ctx, qp, qp+":processing", qp+":processing:deadlines") })
				b.Cleanup(func() { plain.(*bqredis.Transport).Client().Del(ctx, qw, qw+":processing", qw+":processing:deadlines") })
				benchpair.Run(b, 1, cycle(plain, qp), cycle(waited, qw))
			})
		})
	}
}
