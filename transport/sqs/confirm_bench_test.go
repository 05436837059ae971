package sqs

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
)

// BenchmarkPublishConfirmedBatch: batches of 100 messages, raw aws-sdk-go-v2 (ten
// SendMessageBatch calls of ten, the six projected attributes built once) in turns with
// the transport's PublishConfirmed, on the same queue in the same run. vs-base is raw
// time over transport time.
func BenchmarkPublishConfirmedBatch(b *testing.B) {
	const batch = 100
	tr, c, q, url := benchQueue(b)
	ctx := context.Background()
	attrs, err := buildAttributes(&transport.Message{Body: benchBody, Projection: benchProjection})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]*transport.Message, batch)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}
	}
	b.ReportAllocs()
	benchpair.Run(b, batch, func() error {
		for sent := 0; sent < batch; sent += 10 {
			entries := make([]types.SendMessageBatchRequestEntry, 10)
			for i := range entries {
				entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(benchBody)), MessageAttributes: attrs}
			}
			if _, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
				return err
			}
		}
		return nil
	}, func() error { return tr.PublishConfirmed(ctx, msgs) })
}
