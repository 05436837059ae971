package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// MaxBatchEntries is the most messages one SendMessageBatch call carries.
const MaxBatchEntries = 10

// PublishConfirmed writes msgs with SendMessageBatch: runs of consecutive messages for
// the same queue, up to [MaxBatchEntries] and the size limit per call, one call after the
// other so a batch keeps its order. It returns nil once SQS accepted every message.
//
// A message that cannot be sent (no queue, a body SQS refuses, over the size limit) is
// reported and the others go on; an entry SQS refused is reported with SQS's code and
// text. When a call fails as a whole (the endpoint is unreachable, a throttle), its
// messages carry that error and the messages after it are not sent
// ([transport.ErrNotAttempted]). Those results come in a *[transport.BatchError]; a
// message reported there may still have been stored when only SQS's answer was lost, as
// with [Transport.Publish].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if t.consumers.Closed() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	var run batchRun
	for i, m := range msgs {
		e, size, err := t.outgoing(m, "", "")
		if err != nil {
			errs[i] = err
			continue
		}
		full := len(run.idx) > 0 && (run.queue != m.Queue || len(run.idx) == MaxBatchEntries || run.size+size > t.common.MaxMessageSize)
		if full && !t.sendRun(ctx, &run, errs) {
			for j := i; j < len(errs); j++ {
				if errs[j] == nil {
					errs[j] = transport.ErrNotAttempted
				}
			}
			return transport.NewBatchError(errs)
		}
		e.Id = aws.String(strconv.Itoa(len(run.idx))) // its position in the call
		run.queue, run.size = m.Queue, run.size+size
		run.idx, run.entries = append(run.idx, i), append(run.entries, e)
	}
	if len(run.idx) > 0 {
		t.sendRun(ctx, &run, errs)
	}
	return transport.NewBatchError(errs)
}

// batchRun is the pending SendMessageBatch call: consecutive messages for one queue.
type batchRun struct {
	queue   string
	idx     []int // the messages' indexes in the batch
	entries []types.SendMessageBatchRequestEntry
	size    int
}

// sendRun makes the call of run and records each message's result in errs. It reports
// false when the call failed as a whole. run is empty afterwards.
func (t *Transport) sendRun(ctx context.Context, run *batchRun, errs []error) bool {
	defer func() { run.idx, run.entries, run.size = run.idx[:0], run.entries[:0], 0 }()
	var out *awssqs.SendMessageBatchOutput
	err := t.publish(ctx, run.queue, func(ctx context.Context, url string) (err error) {
		out, err = t.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: run.entries})
		return err
	})
	if err != nil {
		for _, i := range run.idx {
			errs[i] = err
		}
		return false
	}
	results := make([]error, len(run.idx))
	for k := range results {
		results[k] = errNoResult
	}
	if out != nil {
		for _, s := range out.Successful {
			if k := entryIndex(s.Id, len(results)); k >= 0 {
				results[k] = nil
			}
		}
		for _, f := range out.Failed {
			if k := entryIndex(f.Id, len(results)); k >= 0 {
				results[k] = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
			}
		}
	}
	for k, i := range run.idx {
		if results[k] != nil {
			errs[i] = fmt.Errorf("sqs: send to %q: %w", run.queue, results[k])
		}
	}
	return true
}

// errNoResult is the cause of a message that SendMessageBatch's answer did not mention.
var errNoResult = errors.New("sqs: SendMessageBatch answered nothing for the message")

// EntryError is SQS's refusal of one entry of a batch call.
type EntryError struct {
	Code        string
	Message     string
	SenderFault bool // the request was at fault, not SQS: sending it again will fail again
}

// Error returns SQS's code and text.
func (e *EntryError) Error() string {
	return "sqs: entry refused: " + e.Code + ": " + e.Message
}
