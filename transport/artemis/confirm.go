package artemis

import (
	"context"
	"errors"
	"fmt"
	"math"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Every write of the transport (Publish, PublishConfirmed, settle writes) is sent
// unsettled on the cached sender of its queue and counts only once Artemis answered it
// with the accepted outcome.

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// write sends m and waits until Artemis accepted it. A link that turns out to be dead,
// when sending or while waiting for the outcome, is attached again once.
func (t *Transport) write(ctx context.Context, m *transport.Message) error {
	if m.Queue == "" {
		return errors.New("artemis: message has no queue")
	}
	ctx, cancel := t.bound(ctx)
	defer cancel()
	for try := 0; ; try++ {
		r, s, err := t.transfer(ctx, m)
		if err != nil {
			return err
		}
		state, err := r.Wait(ctx)
		if err == nil {
			return accepted(m.Queue, state)
		}
		if try > 0 || !linkGone(err) || ctx.Err() != nil {
			return fmt.Errorf("artemis: confirm of write to %q: %w", m.Queue, err)
		}
		t.forget(m.Queue, s, err)
	}
}

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
	ctx, cancel := t.bound(ctx)
	defer cancel()
	errs := make([]error, len(msgs))
	sent := make([]*amqp.SendReceipt, len(msgs))
	for i, m := range msgs {
		if m == nil || m.Queue == "" {
			errs[i] = errors.New("artemis: message has no queue")
			continue
		}
		r, _, err := t.transfer(ctx, m)
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
		sent[i] = &r
	}
	for i, r := range sent {
		if r != nil {
			errs[i] = outcome(ctx, msgs[i].Queue, r)
		}
	}
	return transport.NewBatchError(errs)
}

// transfer sends m unsettled without waiting for its outcome, and returns the receipt
// and the sender. A link found dead is attached again once.
func (t *Transport) transfer(ctx context.Context, m *transport.Message) (amqp.SendReceipt, *amqp.Sender, error) {
	msg := toAMQP(m)
	var err error
	for try := 0; try < 2; try++ {
		var s *amqp.Sender
		if s, err = t.sender(ctx, m.Queue); err != nil {
			return amqp.SendReceipt{}, nil, err
		}
		limit := t.opts.maxSize
		if n := s.MaxMessageSize(); limit == 0 && n > 0 && n <= math.MaxInt32 {
			limit = int(n)
		}
		if err := transport.CheckSize("artemis", m.Queue, len(m.Body), limit); err != nil {
			return amqp.SendReceipt{}, nil, err
		}
		var r amqp.SendReceipt
		if r, err = s.SendWithReceipt(ctx, msg, nil); err == nil {
			return r, s, nil
		}
		err = fmt.Errorf("artemis: send to %q: %w", m.Queue, err)
		if !linkGone(err) {
			return amqp.SendReceipt{}, nil, err
		}
		t.forget(m.Queue, s, err)
		if ctx.Err() != nil {
			break
		}
	}
	return amqp.SendReceipt{}, nil, err
}

// sentWrite is one settle write sent and not yet answered.
type sentWrite struct {
	r     amqp.SendReceipt
	queue string
}

// sendWrites transfers the settle writes ws unsettled, in order, without waiting for
// their outcomes (pipelined settle writes). It stops at the first that cannot be sent
// and returns it as a *transport.SettleWriteError; the writes sent before it stay in
// flight (a redelivery repeats them: a duplicate at worst, never a loss).
func (t *Transport) sendWrites(ctx context.Context, ws []*transport.Message) ([]sentWrite, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	sent := make([]sentWrite, 0, len(ws))
	for _, w := range ws {
		r, _, err := t.transfer(ctx, w)
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: w.Queue, Err: err}
		}
		sent = append(sent, sentWrite{r: r, queue: w.Queue})
	}
	return sent, nil
}

// awaitWrites waits for the outcome of every write in sent and returns nil when each
// was accepted, else the first failure (a *transport.SettleWriteError).
func awaitWrites(ctx context.Context, sent []sentWrite) error {
	for i := range sent {
		if err := outcome(ctx, sent[i].queue, &sent[i].r); err != nil {
			return &transport.SettleWriteError{Queue: sent[i].queue, Err: err}
		}
	}
	return nil
}

// outcome waits for the broker's outcome of a write to queue: nil when it was accepted.
func outcome(ctx context.Context, queue string, r *amqp.SendReceipt) error {
	state, err := r.Wait(ctx)
	if err != nil {
		return fmt.Errorf("artemis: confirm of write to %q: %w", queue, err)
	}
	return accepted(queue, state)
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
