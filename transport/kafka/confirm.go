package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed produces every message with a delivery promise and waits until Kafka
// acknowledged each one (with the producer's acks setting, all in-sync replicas by
// default), up to the delivery timeout ([WithDeliveryTimeout]). Unlike [Transport.Publish]
// it is not fire-and-forget: a nil return means every record is written. When some
// records were not acknowledged the error is a *[transport.BatchError] whose entries are
// [DeliveryError] values. Records of one key go to one partition in the order given, and
// the idempotent producer keeps that order through its retries. A record whose wait ended
// at the timeout stays in the producer's buffer and may still be written later: reported
// as failed, it may then arrive twice, never not at all. The call does not wait out the
// producer's linger: the producer flushes while the batch is in flight (records other
// goroutines produce meanwhile are sent without lingering too).
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	recs := make([]*kgo.Record, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		r, err := t.record(m, now)
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
