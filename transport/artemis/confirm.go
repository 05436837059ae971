package artemis

import (
	"context"
	"errors"
	"fmt"
	"math"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed writes msgs in order, every transfer in flight at once (unsettled, on
// the cached sender of each queue), then waits for Artemis's outcomes together: one round
// trip for the batch instead of one per message. Only an accepted outcome confirms a
// message. Without a deadline on ctx the whole call is bounded by the confirm timeout.
//
// A message that cannot be sent (no queue, over the size limit) is reported and the
// others go on; when a transfer fails (the link or connection went away; a dead link is
// attached again once, as [Transport.Publish] does), the messages after it are not sent
// and are reported with [transport.ErrNotAttempted], so a batch's order is kept. Those
// results come in a *[transport.BatchError].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.confirmTimeout)
		defer cancel()
	}
	errs := make([]error, len(msgs))
	type inFlight struct {
		r     amqp.SendReceipt
		queue string
	}
	sent := make([]*inFlight, len(msgs))
	for i, m := range msgs {
		if m == nil || m.Queue == "" {
			errs[i] = errors.New("artemis: message has no queue")
			continue
		}
		r, err := t.transfer(ctx, m)
		if errors.Is(err, transport.ErrTooLarge) {
			errs[i] = err
			continue
		}
		if err != nil {
			errs[i] = err
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = transport.ErrNotAttempted
			}
			break
		}
		sent[i] = &inFlight{r: r, queue: m.Queue}
	}
	for i, f := range sent {
		if f == nil {
			continue
		}
		state, err := f.r.Wait(ctx)
		if err != nil {
			errs[i] = fmt.Errorf("artemis: confirm of write to %q: %w", f.queue, err)
			continue
		}
		errs[i] = accepted(f.queue, state)
	}
	return transport.NewBatchError(errs)
}

// transfer sends m unsettled without waiting for its outcome. A link found dead is
// attached again once.
func (t *Transport) transfer(ctx context.Context, m *transport.Message) (amqp.SendReceipt, error) {
	msg := toAMQP(m)
	var err error
	for try := 0; try < 2; try++ {
		var s *amqp.Sender
		if s, err = t.sender(ctx, m.Queue); err != nil {
			return amqp.SendReceipt{}, err
		}
		limit := t.opts.maxSize
		if n := s.MaxMessageSize(); limit == 0 && n > 0 && n <= math.MaxInt32 {
			limit = int(n)
		}
		if err := transport.CheckSize("artemis", m.Queue, len(m.Body), limit); err != nil {
			return amqp.SendReceipt{}, err
		}
		var r amqp.SendReceipt
		if r, err = s.SendWithReceipt(ctx, msg, nil); err == nil {
			return r, nil
		}
		err = fmt.Errorf("artemis: send to %q: %w", m.Queue, err)
		if !linkGone(err) {
			return amqp.SendReceipt{}, err
		}
		t.forget(m.Queue, s, err)
		if ctx.Err() != nil {
			break
		}
	}
	return amqp.SendReceipt{}, err
}

// accepted turns the broker's outcome of a write into nil (accepted) or an error
// matching [ErrRejected].
func accepted(queue string, state amqp.DeliveryState) error {
	switch st := state.(type) {
	case *amqp.StateAccepted:
		return nil
	case *amqp.StateRejected:
		if st.Error != nil {
			return fmt.Errorf("%w: %q rejected it: %v", ErrRejected, queue, st.Error)
		}
		return fmt.Errorf("%w: %q rejected it", ErrRejected, queue)
	default:
		return fmt.Errorf("%w: %q answered %T", ErrRejected, queue, state)
	}
}
