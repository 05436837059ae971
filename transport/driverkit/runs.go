package driverkit

import (
	"context"

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
