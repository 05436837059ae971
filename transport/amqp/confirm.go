package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed publishes msgs in order on one confirm-mode channel, every publish in
// flight at once, then waits for all their publisher confirms together, up to the confirm
// timeout counted from the last publish. It confirms even when [WithoutPublishConfirms]
// was given (that option only concerns [Transport.Publish]). When some messages were not
// confirmed (nacked, timed out, or not sent because the channel failed; those after a
// failed send are reported with [transport.ErrNotAttempted]) the error is a
// *[transport.BatchError].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pc, err := t.getPub(ctx)
	if err != nil {
		return err
	}
	defer t.putPub(pc)
	errs := make([]error, len(msgs))
	dcs := make([]*amqp091.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		if m == nil || m.Queue == "" {
			errs[i] = errors.New("amqp: message has no queue")
			continue
		}
		if err := transport.CheckSize("amqp", m.Queue, len(m.Body), t.s.maxSize); err != nil {
			errs[i] = err
			continue
		}
		dc, err := t.send(ctx, pc, m)
		if err != nil {
			errs[i] = err
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = transport.ErrNotAttempted
			}
			break
		}
		dcs[i] = dc
	}
	t.awaitConfirms(ctx, msgs, dcs, errs)
	return transport.NewBatchError(errs)
}

// awaitConfirms waits for every non-nil confirm of dcs under one deadline (the confirm
// timeout) and records in errs each write that was not acknowledged.
func (t *Transport) awaitConfirms(ctx context.Context, msgs []*transport.Message, dcs []*amqp091.DeferredConfirmation, errs []error) {
	timer := time.NewTimer(t.s.confirmTimeout)
	defer timer.Stop()
	var ended error // set once the deadline or ctx ended the wait
	for i, dc := range dcs {
		if dc == nil {
			continue
		}
		if ended == nil {
			select {
			case <-dc.Done():
			case <-ctx.Done():
				ended = ctx.Err()
			case <-timer.C:
				ended = context.DeadlineExceeded
			}
		}
		select {
		case <-dc.Done():
			if !dc.Acked() {
				errs[i] = errNacked
			}
		default:
			errs[i] = fmt.Errorf("amqp: waiting for the confirm of a write to %q: %w", msgs[i].Queue, ended)
		}
	}
}
