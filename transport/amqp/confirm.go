package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed publishes msgs in order on one confirm-mode channel, every publish in
// flight at once, then waits for all their publisher confirms together, up to the confirm
// timeout counted once the publishes are made. It confirms even when [WithoutPublishConfirms]
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
	ss := make([]sent, len(msgs))
	for i, m := range msgs {
		if m == nil || m.Queue == "" {
			errs[i] = errors.New("amqp: message has no queue")
			continue
		}
		if err := transport.CheckSize("amqp", m.Queue, len(m.Body), t.s.maxSize); err != nil {
			errs[i] = err
			continue
		}
		s, err := t.send(ctx, pc, m, true)
		if err != nil {
			errs[i] = err
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = transport.ErrNotAttempted
			}
			break
		}
		ss[i] = s
	}
	t.awaitConfirms(ctx, msgs, ss, errs)
	t.checkReturns(ss, errs)
	return transport.NewBatchError(errs)
}

// awaitConfirms waits for every sent confirm of ss under one deadline (the confirm
// timeout, from the first confirm not in yet) and records in errs each write that was
// not acknowledged. A write not sent (no confirm) keeps the error errs has for it.
func (t *Transport) awaitConfirms(ctx context.Context, msgs []*transport.Message, ss []sent, errs []error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var ended error // set once the deadline or ctx ended the wait
	for i, s := range ss {
		dc := s.dc
		if dc == nil {
			continue
		}
		if ended == nil {
			select {
			case <-dc.Done():
			default:
				if timer == nil {
					timer = time.NewTimer(t.s.confirmTimeout)
				}
				select {
				case <-dc.Done():
				case <-ctx.Done():
					ended = ctx.Err()
				case <-timer.C:
					ended = context.DeadlineExceeded
				}
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
