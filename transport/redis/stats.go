package redis

import (
	"context"
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts queue's messages in one round trip: Ready is the length of the
// ready list, InFlight the messages workers reserved and have not settled (the
// <q>:processing list, or the <prefix><q>:reserved set in the Laravel layout),
// Delayed the messages waiting out a delay (<q>:delayed). Appended is
// [transport.UnknownCount]: a list keeps no count of what went through it. Redis drops
// an empty list, so a queue always exists.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	if queue == "" {
		return transport.QueueStats{}, fmt.Errorf("redis: stats: empty queue name")
	}
	if t.isClosed() {
		return transport.QueueStats{}, transport.ErrClosed
	}
	ready := t.ready(queue)
	pipe := t.client.Pipeline()
	readyN := pipe.LLen(ctx, ready)
	delayedN := pipe.ZCard(ctx, delayedKey(ready))
	var inFlight interface{ Result() (int64, error) }
	if t.laravel {
		inFlight = pipe.ZCard(ctx, reservedKey(ready))
	} else {
		inFlight = pipe.LLen(ctx, processingKey(queue))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return transport.QueueStats{}, fmt.Errorf("redis: stats %q: %w", ready, err)
	}
	s := transport.QueueStats{Exists: true, Appended: transport.UnknownCount}
	s.Ready, _ = readyN.Result()
	s.Delayed, _ = delayedN.Result()
	s.InFlight, _ = inFlight.Result()
	return s, nil
}
