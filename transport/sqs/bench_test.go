package sqs

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The benchmarks pair the transport with raw aws-sdk-go-v2 doing the same calls in the
// same run:
//
//	go test -run '^$' -bench . -benchmem -benchtime 2000x ./transport/sqs/
//
// Receive: ReceiveMessage in batches of 10 and one DeleteMessage per message (the
// queue is filled before the timer starts). Publish: one SendMessage with the six
// projected attributes.

var benchBody = []byte(`{"job":"urn:babel:bench:run","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"bench","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)

var benchProjection = transport.Projection{URN: "urn:babel:bench:run", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000}

func benchQueue(b *testing.B) (*Transport, *awssqs.Client, string, string) {
	b.Helper()
	tr := openTestURL(b, testURL(b), WithWaitTime(0))
	q := transporttest.UniqueName("bqbench")
	u := queueURL(b, tr, q)
	b.Cleanup(func() {
		_, _ = rawClient(b, tr).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	})
	return tr, rawClient(b, tr), q, u
}

func fill(b *testing.B, c *awssqs.Client, url string, n int) {
	b.Helper()
	attrs, err := buildAttributes(&transport.Message{Body: benchBody, Projection: benchProjection})
	if err != nil {
		b.Fatal(err)
	}
	for sent := 0; sent < n; {
		k := min(10, n-sent)
		entries := make([]types.SendMessageBatchRequestEntry, k)
		for i := range entries {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(benchBody)), MessageAttributes: attrs}
		}
		if _, err := c.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			b.Fatal(err)
		}
		sent += k
	}
}

func BenchmarkRawReceiveDelete(b *testing.B) {
	_, c, _, url := benchQueue(b)
	fill(b, c, url, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for got := 0; got < b.N; {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range out.Messages {
			if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				b.Fatal(err)
			}
			got++
		}
	}
}

func BenchmarkTransportReceiveAck(b *testing.B) {
	tr, c, q, url := benchQueue(b)
	fill(b, c, url, b.N)
	ctx := context.Background()
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close(ctx)
	b.ResetTimer()
	for range b.N {
		d, err := cons.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawSend(b *testing.B) {
	_, c, _, url := benchQueue(b)
	attrs, err := buildAttributes(&transport.Message{Body: benchBody, Projection: benchProjection})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(benchBody)), MessageAttributes: attrs}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportPublish(b *testing.B) {
	tr, _, q, _ := benchQueue(b)
	ctx := context.Background()
	m := &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}
	b.ResetTimer()
	for range b.N {
		if err := tr.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// The same work with 8 workers: raw, each worker receives batches and deletes; the
// transport, one consumer with prefetch 8 and 8 workers doing Receive + Ack.

func BenchmarkRawReceiveDelete8(b *testing.B) {
	_, c, _, url := benchQueue(b)
	fill(b, c, url, b.N)
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for left.Load() > 0 {
				out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
					QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
					MessageAttributeNames:       []string{"All"},
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
				})
				if err != nil {
					b.Error(err)
					return
				}
				for _, m := range out.Messages {
					if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						b.Error(err)
						return
					}
					left.Add(-1)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkTransportReceiveAck8(b *testing.B) {
	tr, c, q, url := benchQueue(b)
	fill(b, c, url, b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close(context.Background())
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				d, err := cons.Receive(ctx)
				if err != nil {
					return
				}
				if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
					b.Error(err)
					return
				}
				if left.Add(-1) == 0 {
					cancel()
				}
			}
		})
	}
	wg.Wait()
}
