package driverkit

import (
	"context"
	"errors"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Run is one broker call of a confirmed publish: consecutive messages of the batch to
// one queue, as the driver prepared them.
type Run[E any] struct {
	Queue   string
	Index   []int // each entry's message's index in the batch
	Entries []E
	Size    int // the entries' sizes added up
}

// PublishRuns is the PublishConfirmed of a driver whose broker takes several messages
// to one queue in a call (SQS's SendMessageBatch): it splits msgs into runs of
// consecutive messages to the same queue, at most maxN entries and maxSize bytes each,
// and sends them one after the other, so that a batch keeps its order. prepare checks a
// message and builds its entry with its size; a message it refuses is reported and the
// others go on. send makes the call of a run and returns the outcome of each entry; an
// error of its own fails the call as a whole: its messages carry that error, and the
// messages after it are not sent ([transport.ErrNotAttempted]). The result is nil or a
// *[transport.BatchError].
func PublishRuns[E any](ctx context.Context, msgs []*transport.Message, maxN, maxSize int,
	prepare func(*transport.Message) (E, int, error), send func(context.Context, *Run[E]) ([]error, error)) error {
	errs := make([]error, len(msgs))
	var run Run[E]
	flush := func() bool {
		defer func() { run.Index, run.Entries, run.Size = run.Index[:0], run.Entries[:0], 0 }()
		each, err := send(ctx, &run)
		for k, i := range run.Index {
			switch {
			case err != nil:
				errs[i] = err
			case k < len(each):
				errs[i] = each[k]
			}
		}
		return err == nil
	}
	for i, m := range msgs {
		e, size, err := prepare(m)
		if err != nil {
			errs[i] = err
			continue
		}
		full := len(run.Index) > 0 && (run.Queue != m.Queue || len(run.Index) == maxN || run.Size+size > maxSize)
		if full && !flush() {
			for j := i; j < len(errs); j++ {
				if errs[j] == nil {
					errs[j] = transport.ErrNotAttempted
				}
			}
			return transport.NewBatchError(errs)
		}
		run.Queue, run.Size = m.Queue, run.Size+size
		run.Index, run.Entries = append(run.Index, i), append(run.Entries, e)
	}
	if len(run.Index) > 0 {
		flush()
	}
	return transport.NewBatchError(errs)
}

// PublishInOrder is the PublishConfirmed of a driver whose client sends a message and
// confirms it later (a deferred confirmation, a send receipt): it sends msgs in order,
// then waits for their outcomes together, so that a batch costs one round trip. A
// message that check refuses, or that send refuses with an error matching
// [transport.ErrTooLarge] (nothing was sent), is reported and the others go on; when
// send fails otherwise, the messages after it are not sent
// ([transport.ErrNotAttempted]), so that a batch keeps its order. await gets what send
// returned for each message (the zero R for one not sent) with the errors so far, and
// sets the outcome of each message sent. The result is nil or a *[transport.BatchError].
func PublishInOrder[R any](ctx context.Context, msgs []*transport.Message, check func(*transport.Message) error,
	send func(context.Context, *transport.Message) (R, error), await func(ctx context.Context, sent []R, errs []error)) error {
	errs, sent := make([]error, len(msgs)), make([]R, len(msgs))
	for i, m := range msgs {
		if errs[i] = check(m); errs[i] != nil {
			continue
		}
		if sent[i], errs[i] = send(ctx, m); errs[i] != nil && !errors.Is(errs[i], transport.ErrTooLarge) {
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = transport.ErrNotAttempted
			}
			break
		}
	}
	await(ctx, sent, errs)
	return transport.NewBatchError(errs)
}
