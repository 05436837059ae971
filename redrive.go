package babelqueue

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// RedriveResult counts what [App.Redrive] did.
type RedriveResult struct {
	// Moved is the number of messages written back to their queue.
	Moved int
	// Kept is the number of messages left on the dead-letter queue because they are
	// not envelopes (wrapped poison bodies, gate rejections of another schema version).
	Kept int
}

// Redrive moves dead-lettered messages back to the queue they failed on
// (dead_letter.original_queue, else the app's queue): the dead_letter member is
// removed and attempts reset to 0; every other byte, the key and the headers are kept.
// Each move is confirmed by the broker before the dead-lettered copy is acknowledged.
// Messages that are not envelopes stay on the dead-letter queue. Redrive stops after
// max messages (0: no limit), once the dead-letter queue stays empty for idle, or when
// ctx ends. Do not run it while a Run consumes the dead-letter queue.
//
// When ctx ends, the message in hand is still settled and the consumer closed, each
// within the settle timeout ([WithSettleTimeout]) and all of it within the shutdown
// grace ([WithShutdownGrace]) from then on, whatever the broker's connection is doing:
// a settlement that has not finished by then is abandoned and the message stays on the
// dead-letter queue (or comes back to it).
func (a *App) Redrive(ctx context.Context, max int, idle time.Duration) (RedriveResult, error) {
	var res RedriveResult
	if idle <= 0 {
		idle = 2 * time.Second
	}
	// after outlives ctx by the shutdown grace at most: the settlements and the Close.
	after, endAfter := context.WithCancel(context.WithoutCancel(ctx))
	defer endAfter()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(a.cfg.shutdownGrace, endAfter) })()
	c, err := a.tr.Consume(ctx, a.dlq, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		return res, fmt.Errorf("babelqueue: redrive: consume %q: %w", a.dlq, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(after, a.cfg.settleTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}()
	kept := map[[32]byte]bool{}
	for max == 0 || res.Moved < max {
		rctx, cancel := context.WithTimeout(ctx, idle)
		d, err := c.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				return res, nil
			}
			return res, fmt.Errorf("babelqueue: redrive: receive: %w", err)
		}
		sctx, scancel := context.WithTimeout(after, a.cfg.settleTimeout)
		m, ok := redriveWrite(d, a.cfg.queue)
		if !ok {
			sum := sha256.Sum256(d.Body)
			seen := kept[sum]
			kept[sum] = true
			if !seen {
				res.Kept++
			}
			err := c.Settle(sctx, d, transport.Settlement{Outcome: transport.Rewind})
			scancel()
			if err != nil {
				return res, fmt.Errorf("babelqueue: redrive: giving back a message that is not an envelope: %w", err)
			}
			if seen {
				// Every message left is one already kept: the queue holds nothing else.
				return res, nil
			}
			continue
		}
		err = c.Settle(sctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{m}})
		if err != nil {
			_ = c.Settle(sctx, d, transport.Settlement{Outcome: transport.Rewind})
			scancel()
			return res, fmt.Errorf("babelqueue: redrive to %q: %w", m.Queue, err)
		}
		scancel()
		res.Moved++
		a.log.Info("babelqueue: redriven", "from", a.dlq, "to", m.Queue, "urn", m.Projection.URN, "id", m.Projection.MessageID)
	}
	return res, nil
}

// redriveWrite builds the write that puts a dead-lettered envelope back on its queue.
func redriveWrite(d *transport.Delivery, fallback string) (*transport.Message, bool) {
	env, err := envelope.Decode(d.Body)
	if err != nil || env.Accepts() != nil {
		return nil, false
	}
	body, err := envelope.RemoveDeadLetter(d.Body)
	if err != nil {
		return nil, false
	}
	if env.Attempts != 0 {
		if body, err = envelope.SetAttempts(body, 0); err != nil {
			return nil, false
		}
	}
	queue := fallback
	if env.DeadLetter != nil && env.DeadLetter.OriginalQueue != "" {
		queue = env.DeadLetter.OriginalQueue
	}
	return &transport.Message{
		Queue: queue, Body: body, Key: d.Key, Headers: d.Headers,
		Projection: transport.ProjectionOf(env),
	}, true
}
