package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats counts queue's messages in one round trip: Ready is the length of the
// ready list, InFlight the messages workers reserved and have not settled (the
// <q>:processing list, or the <prefix><q>:reserved set in the Laravel layout),
// Delayed the messages waiting out a delay (<q>:delayed). Oldest is the meta.created_at
// of the head of the ready list, the next message a worker takes (a list keeps no time
// of its own; a retried message keeps its first created_at; zero when the head is not
// an envelope). Appended is
// [transport.UnknownCount]: a list keeps no count of what went through it. Redis drops
// an empty list, so a queue always exists.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	if queue == "" {
		return transport.QueueStats{}, fmt.Errorf("redis: stats: empty queue name")
	}
	if t.closed.Load() {
		return transport.QueueStats{}, transport.ErrClosed
	}
	ready := t.ready(queue)
	pipe := t.client.Pipeline()
	readyN := pipe.LLen(ctx, ready)
	head := pipe.LIndex(ctx, ready, 0)
	delayedN := pipe.ZCard(ctx, delayedKey(ready))
	var inFlight interface{ Result() (int64, error) }
	if t.laravel {
		inFlight = pipe.ZCard(ctx, reservedKey(ready))
	} else {
		inFlight = pipe.LLen(ctx, processingKey(queue))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return transport.QueueStats{}, fmt.Errorf("redis: stats %q: %w", ready, err)
	}
	s := transport.QueueStats{Exists: true, Appended: transport.UnknownCount}
	s.Ready, _ = readyN.Result()
	s.Delayed, _ = delayedN.Result()
	s.InFlight, _ = inFlight.Result()
	if el, err := head.Bytes(); err == nil && len(el) > 0 {
		if !t.laravel {
			if body, _, ok := unframe(el); ok {
				el = body
			}
		}
		s.Oldest, _ = envelope.CreatedAt(el)
	}
	return s, nil
}
