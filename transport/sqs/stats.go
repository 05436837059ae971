package sqs

import (
	"context"
	"fmt"

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
	n, err := t.queueNumbers(ctx, url, types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	switch {
	case isMissingQueue(err):
		return s, nil
	case err != nil:
		return s, fmt.Errorf("sqs: stats %q: %w", t.QueueName(queue), err)
	}
	s.Exists, s.Ready, s.InFlight, s.Delayed = true, n[0], n[1], n[2] // -1 (unknown) when SQS gave no number
	return s, nil
}
