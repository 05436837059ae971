package transporttest

import (
	"context"
	"errors"

	"github.com/babelqueue-go/babelqueue/transport"
)

// SilentSettles wraps tr so that its consumers' Settle and Close never get an answer,
// as on a connection gone silent: each waits until its context ends (Close then closes
// the real consumer). Receiving and publishing work as tr's do. It tests that a loop
// stopping (SIGTERM) bounds what it waits for on a silent broker.
func SilentSettles(tr transport.Transport) transport.Transport { return silentSettles{tr} }

type silentSettles struct{ transport.Transport }

func (s silentSettles) Consume(ctx context.Context, q string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	c, err := s.Transport.Consume(ctx, q, opts)
	if err != nil {
		return nil, err
	}
	return silentConsumer{c}, nil
}

type silentConsumer struct{ transport.Consumer }

func (silentConsumer) Settle(ctx context.Context, _ *transport.Delivery, _ transport.Settlement) error {
	<-ctx.Done()
	return ctx.Err()
}

func (c silentConsumer) Close(ctx context.Context) error {
	<-ctx.Done()
	return errors.Join(ctx.Err(), c.Consumer.Close(context.Background()))
}
