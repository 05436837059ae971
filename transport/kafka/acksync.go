package kafka

import (
	"context"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.AckSyncer = (*consumer)(nil)

// SyncAcks commits, and waits for, the offsets of every record acknowledged so far
// (the background commit makes them durable up to 100ms later, [WithCommitInterval]).
func (c *consumer) SyncAcks(ctx context.Context) error {
	return c.commit(ctx, nil)
}
