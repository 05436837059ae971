package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed produces every message and waits until Kafka acknowledged each one,
// up to the delivery timeout; the failures are a *[transport.BatchError] of
// [DeliveryError] values. A record whose wait timed out may still be written later.
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	recs := make([]*kgo.Record, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		r, err := t.record(ctx, m, now)
		if err != nil {
			errs[i] = err
			continue
		}
		recs = append(recs, r)
		idx = append(idx, i)
	}
	if len(recs) > 0 {
		for j, err := range t.produceEach(ctx, recs) {
			errs[idx[j]] = err
		}
	}
	return transport.NewBatchError(errs)
}
