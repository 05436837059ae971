package artemis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Every write of the transport (Publish, PublishConfirmed, settle writes) is sent
// unsettled on the cached sender of its queue and counts only once Artemis answered it
// with the accepted outcome.

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// duplicateID returns a value of propDuplicateID no other write of any transport has:
// the transport's random prefix and a count.
func (t *Transport) duplicateID() string {
	return t.dupPrefix + strconv.FormatUint(t.dupSeq.Add(1), 36)
}

// write sends m and waits until Artemis accepted it. A link that turns out to be dead,
// when sending or while waiting for the outcome, is attached again once. Every send of
// the write carries dup, its duplicate id (propDuplicateID; the caller makes one per
// write and keeps it for the write's every try, the publish wait's included): when the
// link dropped after Artemis stored the first copy but before its outcome arrived,
// Artemis drops a later copy and answers accepted, so the write is stored once.
func (t *Transport) write(ctx context.Context, m *transport.Message, dup string) error {
	if err := checkQueue(m); err != nil {
		return err
	}
	ctx, cancel := t.bound(ctx)
	defer cancel()
	for try := 0; ; try++ {
		r, s, err := t.transfer(ctx, m, dup)
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
// the cached sender of each queue), then waits for Artemis's outcomes together; only an
// accepted one confirms a message. Without a deadline on ctx the whole call is bounded by
// the confirm timeout. A message that cannot be sent (no queue, over the size limit) is
// reported and the others go on; after a failed transfer the rest are not sent
// ([transport.ErrNotAttempted]), so a batch's order is kept. The error is a
// *[transport.BatchError].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := t.bound(ctx)
	defer cancel()
	return driverkit.PublishInOrder(ctx, msgs, checkQueue,
		func(ctx context.Context, m *transport.Message) (*amqp.SendReceipt, error) {
			r, _, err := t.transfer(ctx, m, "")
			return &r, err
		},
		func(ctx context.Context, sent []*amqp.SendReceipt, errs []error) {
			for i, r := range sent {
				if errs[i] == nil {
					errs[i] = outcome(ctx, msgs[i].Queue, r)
				}
			}
		})
}

// checkQueue refuses a message without a queue.
func checkQueue(m *transport.Message) error {
	if m == nil || m.Queue == "" {
		return errors.New("artemis: message has no queue")
	}
	return nil
}

// transfer sends m unsettled without waiting for its outcome, and returns the receipt
// and the sender. A link found dead is attached again once (nothing was sent on it).
// dup, when set, is the write's duplicate id (write).
func (t *Transport) transfer(ctx context.Context, m *transport.Message, dup string) (amqp.SendReceipt, *amqp.Sender, error) {
	msg := toAMQP(m)
	if dup != "" {
		msg.ApplicationProperties[propDuplicateID] = dup
	}
	var err error
	for try := 0; try < 2; try++ {
		var s *amqp.Sender
		if s, err = t.sender(ctx, m.Queue); err != nil {
			return amqp.SendReceipt{}, nil, err
		}
		limit := t.opts.MaxMessageSize
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

// sendWrites transfers the settle writes ws unsettled, in order, without waiting for
// their outcomes (pipelined settle writes). It stops at the first that cannot be sent
// and returns it as a *transport.SettleWriteError; the writes sent before it stay in
// flight (a redelivery repeats them: a duplicate at worst, never a loss).
func (t *Transport) sendWrites(ctx context.Context, ws []*transport.Message) ([]amqp.SendReceipt, error) {
	ctx, cancel := t.bound(ctx)
	defer cancel()
	sent := make([]amqp.SendReceipt, len(ws))
	for i, w := range ws {
		var err error
		if sent[i], _, err = t.transfer(ctx, w, ""); err != nil {
			return nil, &transport.SettleWriteError{Queue: w.Queue, Err: err}
		}
	}
	return sent, nil
}

// awaitWrites waits for the outcome of every write of ws, sent, and returns nil when
// each was accepted, else the first failure (a *transport.SettleWriteError).
func awaitWrites(ctx context.Context, ws []*transport.Message, sent []amqp.SendReceipt) error {
	for i := range sent {
		if err := outcome(ctx, ws[i].Queue, &sent[i]); err != nil {
			return &transport.SettleWriteError{Queue: ws[i].Queue, Err: err}
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
