package pulsar

import (
	"context"
	"fmt"
	"slices"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed writes msgs in order, every message in flight at once, and waits
// for the broker's receipts together (bounded by the send timeout when ctx has no
// deadline). It returns nil once every message was persisted, else a
// *[transport.BatchError]: a message that cannot be sent is reported and the others go
// on, but when a topic's producer cannot be had the messages after it are not sent
// ([transport.ErrNotAttempted]).
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.sendTimeout)
		defer cancel()
	}
	r := driverkit.NewReceipts(len(msgs))
	var used []pc.Producer
	for i, m := range msgs {
		pm, err := t.check(m)
		if err != nil {
			r.Set(i, err)
			continue
		}
		p, err := t.producer(ctx, m.Queue)
		if err != nil {
			r.Set(i, fmt.Errorf("pulsar: publish to %q: %w", m.Queue, err))
			for j := i + 1; j < len(msgs); j++ {
				r.Set(j, transport.ErrNotAttempted)
			}
			break
		}
		if !slices.Contains(used, p) {
			used = append(used, p)
		}
		t.sendAsync(ctx, p, m.Queue, pm, r, i)
	}
	for _, p := range used {
		if err := p.FlushWithCtx(ctx); err != nil {
			t.log.Debug("pulsar: flush before awaiting receipts", "error", err)
		}
	}
	return transport.NewBatchError(r.Wait(ctx))
}

// sendAsync hands pm, a write to queue, to its producer p and records its outcome in r
// at i. A write that fails makes the next write to queue get a new producer
// ([Transport.dropProducer]).
func (t *Transport) sendAsync(ctx context.Context, p pc.Producer, queue string, pm *pc.ProducerMessage, r *driverkit.Receipts, i int) {
	r.Expect(i)
	p.SendAsync(ctx, pm, func(_ pc.MessageID, _ *pc.ProducerMessage, err error) {
		if err != nil {
			t.dropProducer(queue, p)
			err = fmt.Errorf("pulsar: publish to %q: %w", queue, t.refused(queue, wireSize(pm), err))
		}
		r.Done(i, err)
	})
}
