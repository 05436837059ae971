package pulsar

import (
	"context"
	"fmt"
	"slices"
	"sync"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed writes msgs in order with the producer's asynchronous send, every
// message in flight at once, flushes each producer used (a batching producer sends
// what it holds) and waits for the broker's receipts together. It returns nil once every
// message was persisted. Without a deadline on ctx the wait is bounded by the send
// timeout, which the producer applies to each message as well.
//
// A message that cannot be sent (no queue, an empty body, over the size limit) is
// reported and the others go on; when a topic's producer cannot be had, the messages
// after it are not sent ([transport.ErrNotAttempted]), so a batch's order is kept. Those
// results, and the messages the broker did not persist, come in a
// *[transport.BatchError].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.sendTimeout)
		defer cancel()
	}
	r := newReceipts(len(msgs))
	var used []pc.Producer
	for i, m := range msgs {
		pm, err := t.check(m)
		if err != nil {
			r.errs[i] = err
			continue
		}
		p, err := t.producer(ctx, m.Queue)
		if err != nil {
			r.errs[i] = fmt.Errorf("pulsar: publish to %q: %w", m.Queue, err)
			for j := i + 1; j < len(msgs); j++ {
				r.errs[j] = transport.ErrNotAttempted
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
			t.opts.logger.Debug("pulsar: flush before awaiting receipts", "error", err)
		}
	}
	return transport.NewBatchError(r.wait(ctx))
}

// sendAsync hands pm, a write to queue, to its producer p and records its outcome in r
// at i. A write that fails makes the next write to queue get a new producer
// ([Transport.dropProducer]).
func (t *Transport) sendAsync(ctx context.Context, p pc.Producer, queue string, pm *pc.ProducerMessage, r *receipts, i int) {
	r.expect(i)
	p.SendAsync(ctx, pm, func(_ pc.MessageID, _ *pc.ProducerMessage, err error) {
		if err != nil {
			t.dropProducer(queue, p)
			err = fmt.Errorf("pulsar: publish to %q: %w", queue, t.refused(queue, wireSize(pm), err))
		}
		r.done(i, err)
	})
}

// receipts collects the outcomes of a batch's asynchronous sends.
type receipts struct {
	mu      sync.Mutex
	errs    []error
	open    []bool // a send whose receipt has not come
	pending int
	changed chan struct{} // closed when pending reaches zero
}

func newReceipts(n int) *receipts { return &receipts{errs: make([]error, n), open: make([]bool, n)} }

func (r *receipts) expect(i int) {
	r.mu.Lock()
	r.open[i] = true
	r.pending++
	r.mu.Unlock()
}

func (r *receipts) done(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open[i] {
		return // already reported as not confirmed when the wait ended
	}
	r.open[i] = false
	r.errs[i] = err
	r.pending--
	if r.pending == 0 && r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// wait returns the outcomes once every receipt came, or when ctx ends: then the sends
// still open are reported with ctx's error (a receipt that comes later is ignored).
func (r *receipts) wait(ctx context.Context) []error {
	r.mu.Lock()
	if r.pending > 0 {
		ch := make(chan struct{})
		r.changed = ch
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	for i, open := range r.open {
		if open {
			r.open[i] = false
			r.errs[i] = fmt.Errorf("pulsar: waiting for the receipt of a write: %w", ctx.Err())
		}
	}
	return r.errs
}
