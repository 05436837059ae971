package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// MaxBatchEntries is the most messages one SendMessageBatch call carries.
const MaxBatchEntries = 10

// batchAPI is the batch call of the SQS client (an *sqs.Client has it).
type batchAPI interface {
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
}

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
	if t.isClosed() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	bc, ok := t.client.(batchAPI)
	if !ok { // a client without the batch call: one SendMessage per message
		for i, m := range msgs {
			if err := t.Publish(ctx, m); err != nil {
				errs[i] = err
				for j := i + 1; j < len(msgs); j++ {
					errs[j] = transport.ErrNotAttempted
				}
				break
			}
		}
		return transport.NewBatchError(errs)
	}
	var run batchRun
	for i, m := range msgs {
		e, size, err := t.batchEntry(m)
		if err != nil {
			errs[i] = err
			continue
		}
		if len(run.idx) > 0 && (run.queue != m.Queue || len(run.idx) == MaxBatchEntries || run.size+size > t.maxSize) {
			if !t.sendRun(ctx, bc, &run, errs) {
				markRest(errs, i)
				return transport.NewBatchError(errs)
			}
		}
		run.add(m.Queue, i, e, size)
	}
	if len(run.idx) > 0 {
		t.sendRun(ctx, bc, &run, errs)
	}
	return transport.NewBatchError(errs)
}

// markRest reports every message from index i on that has no result yet as not sent.
func markRest(errs []error, i int) {
	for j := i; j < len(errs); j++ {
		if errs[j] == nil {
			errs[j] = transport.ErrNotAttempted
		}
	}
}

// batchRun is the pending SendMessageBatch call: consecutive messages for one queue.
type batchRun struct {
	queue   string
	idx     []int // the messages' indexes in the batch
	entries []types.SendMessageBatchRequestEntry
	size    int
}

// add appends the entry of message i; its Id is its position in the call.
func (r *batchRun) add(queue string, i int, e types.SendMessageBatchRequestEntry, size int) {
	e.Id = aws.String(strconv.Itoa(len(r.idx)))
	r.queue = queue
	r.idx = append(r.idx, i)
	r.entries = append(r.entries, e)
	r.size += size
}

func (r *batchRun) reset() {
	r.idx, r.entries, r.size = r.idx[:0], r.entries[:0], 0
}

// batchEntry builds the entry of m (without its Id) and the size SQS counts of it.
func (t *Transport) batchEntry(m *transport.Message) (types.SendMessageBatchRequestEntry, int, error) {
	var e types.SendMessageBatchRequestEntry
	if m == nil || m.Queue == "" {
		return e, 0, errors.New("sqs: message has no queue")
	}
	if err := checkBody(m.Body); err != nil {
		return e, 0, err
	}
	attrs, err := buildAttributes(m)
	if err != nil {
		return e, 0, err
	}
	size := messageSize(m.Body, attrs)
	if err := transport.CheckSize("sqs", m.Queue, size, t.maxSize); err != nil {
		return e, 0, err
	}
	e = types.SendMessageBatchRequestEntry{
		MessageBody:       aws.String(string(m.Body)),
		MessageAttributes: attrs,
	}
	if strings.HasSuffix(t.QueueName(m.Queue), fifoSuffix) {
		e.MessageGroupId = aws.String(t.groupFor(m))
		e.MessageDeduplicationId = aws.String(dedupID(m, ""))
		if m.Delay > 0 {
			t.warnFIFODelay(m.Queue)
		}
	} else if m.Delay > 0 {
		e.DelaySeconds = int32((min(m.Delay, MaxDelay) + time.Second - 1) / time.Second)
	}
	return e, size, nil
}

// sendRun makes the call of run and records each message's result in errs. It reports
// false when the call failed as a whole. run is empty afterwards.
func (t *Transport) sendRun(ctx context.Context, bc batchAPI, run *batchRun, errs []error) bool {
	defer run.reset()
	fail := func(err error) bool {
		err = fmt.Errorf("sqs: send to %q: %w", run.queue, err)
		for _, i := range run.idx {
			errs[i] = err
		}
		return false
	}
	qurl, err := t.QueueURL(ctx, run.queue)
	if err != nil {
		return fail(err)
	}
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(qurl), Entries: run.entries}
	out, err := bc.SendMessageBatch(ctx, in)
	if err != nil && isMissingQueue(err) && t.prefix == "" {
		// The cached URL names a queue that was deleted: resolve it again once.
		t.forgetURL(run.queue)
		if qurl, rerr := t.QueueURL(ctx, run.queue); rerr == nil {
			in.QueueUrl = aws.String(qurl)
			out, err = bc.SendMessageBatch(ctx, in)
		}
	}
	if err != nil {
		return fail(err)
	}
	results := make([]error, len(run.idx))
	for k := range results {
		results[k] = errNoResult
	}
	at := func(id *string) int {
		k, err := strconv.Atoi(aws.ToString(id))
		if err != nil || k < 0 || k >= len(results) {
			return -1
		}
		return k
	}
	for _, s := range out.Successful {
		if k := at(s.Id); k >= 0 {
			results[k] = nil
		}
	}
	for _, f := range out.Failed {
		if k := at(f.Id); k >= 0 {
			results[k] = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
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
