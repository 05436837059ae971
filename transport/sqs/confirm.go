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
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// MaxBatchEntries is the most messages one SendMessageBatch call carries.
const MaxBatchEntries = 10

// PublishConfirmed writes msgs with SendMessageBatch, up to [MaxBatchEntries] and the
// size limit per call, one call after the other so that a batch keeps its order
// ([driverkit.PublishRuns]). It returns nil once SQS accepted every message, else a
// *[transport.BatchError]; an entry SQS refused carries an [*EntryError].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if t.consumers.Closed() {
		return transport.ErrClosed
	}
	prepare := func(m *transport.Message) (types.SendMessageBatchRequestEntry, int, error) {
		return t.outgoing(m, "", "")
	}
	return driverkit.PublishRuns(ctx, msgs, MaxBatchEntries, t.common.MaxMessageSize, prepare, t.sendRun)
}

// sendRun makes the SendMessageBatch call of run and returns each message's result.
func (t *Transport) sendRun(ctx context.Context, run *driverkit.Run[types.SendMessageBatchRequestEntry]) ([]error, error) {
	for k := range run.Entries {
		run.Entries[k].Id = aws.String(strconv.Itoa(k)) // its position in the call
	}
	var out *awssqs.SendMessageBatchOutput
	err := t.publish(ctx, run.Queue, func(ctx context.Context, url string) (err error) {
		out, err = t.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: run.Entries})
		return err
	})
	if err != nil {
		return nil, err
	}
	results := make([]error, len(run.Entries))
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
	for k, err := range results {
		if err != nil {
			results[k] = fmt.Errorf("sqs: send to %q: %w", run.Queue, err)
		}
	}
	return results, nil
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
