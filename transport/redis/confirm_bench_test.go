package redis_test

import (
	"context"
	"testing"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// BenchmarkPublishConfirmedBatch: batches of 100 messages, raw go-redis (one pipeline of
// 100 RPUSH, every reply read) in turns with the transport's PublishConfirmed (its
// pipelined RPUSH of the framed bodies), on the same server in the same run. vs-base is
// raw time over transport time.
func BenchmarkPublishConfirmedBatch(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	c := client(b)
	rq, tq := transporttest.UniqueName("bqbench"), transporttest.UniqueName("bqbench")
	for _, q := range []string{rq, tq} {
		cleanKeys(b, c, q+"*")
	}
	tr := newTransport(b, c)
	body := envelope("bench")
	msgs := make([]*transport.Message, batch)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: tq, Body: body}
	}
	b.ReportAllocs()
	benchpair.Run(b, batch, func() error {
		p := c.Pipeline()
		for range batch {
			p.RPush(ctx, rq, body)
		}
		_, err := p.Exec(ctx)
		return err
	}, func() error { return tr.PublishConfirmed(ctx, msgs) })
	b.StopTimer()
	cleanKeys(b, c, rq+"*")
	cleanKeys(b, c, tq+"*")
}
