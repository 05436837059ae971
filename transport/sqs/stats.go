package sqs

import (
	"context"
	"fmt"
	"strconv"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// QueueStats reads the queue's approximate counts (GetQueueAttributes, eventually
// consistent): Ready, InFlight (received and not deleted) and Delayed. Appended and
// Oldest are unknown. A queue that does not exist has Exists false; nothing is created.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	s := transport.QueueStats{Appended: transport.UnknownCount}
	if t.consumers.Closed() {
		return s, transport.ErrClosed
	}
	url, ok, err := t.existingURL(ctx, queue)
	if err != nil || !ok {
		return s, err
	}
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	switch {
	case isMissingQueue(err):
		return s, nil
	case err != nil:
		return s, fmt.Errorf("sqs: stats %q: %w", t.QueueName(queue), err)
	}
	count := func(name types.QueueAttributeName) int64 {
		n, err := strconv.ParseInt(out.Attributes[string(name)], 10, 64)
		if err != nil {
			return transport.UnknownCount
		}
		return n
	}
	s.Exists = true
	s.Ready = count(types.QueueAttributeNameApproximateNumberOfMessages)
	s.InFlight = count(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	s.Delayed = count(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	return s, nil
}
