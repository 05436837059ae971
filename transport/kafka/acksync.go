package kafka

import (
	"context"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.AckSyncer = (*consumer)(nil)

// SyncAcks waits for the settle writes still in flight (a settle with writes returns
// once they are handed to the producer, see [WithPipelinedSettles]), then commits, and
// waits for, the offsets of every record acknowledged so far (the background commit
// makes them durable up to 100ms later, [WithCommitInterval]). A record whose write
// failed meanwhile was rewound by the transport: it is not committed and comes again.
func (c *consumer) SyncAcks(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.pipeWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.commit(ctx, nil)
}
