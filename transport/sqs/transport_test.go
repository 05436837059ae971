package sqs

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kitQueues names the kit's queues and deletes them (standard and FIFO form) when each
// case ends, so repeated runs leave nothing behind on the broker.
func kitQueues(admin *Transport) func(t *testing.T) string {
	return func(t *testing.T) string {
		q := transporttest.UniqueName("bqtest")
		t.Cleanup(func() {
			for _, name := range []string{q, q + ".fifo", q + "-dlq", q + "-dlq.fifo"} {
				out, err := rawClient(t, admin).GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
				if err == nil {
					_, _ = rawClient(t, admin).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
				}
			}
		})
		return q
	}
}

// TestKit runs every group of the behavioural kit against ElasticMQ, side by side (each
// case on queues of its own). Browse walks the queue and makes every message visible
// again, in no particular order; counts come from GetQueueAttributes.
func TestKit(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.RunAll(t, transporttest.Harness{
		Config: transporttest.Config{
			NewQueue: kitQueues(admin),
			Open: func(t *testing.T) transport.Transport {
				tr, _ := openProxied(t, "")
				return tr
			},
			TextBodiesOnly:     true,
			NativeRedeliveries: true,
			ReceiveTimeout:     20 * time.Second,
			// ElasticMQ goes away from the transport (every connection cut, new ones
			// refused) and comes back.
			BreakSettleWrites: func(t *testing.T, tr transport.Transport) func() {
				p := proxyOf(t, tr.(*Transport))
				p.Down()
				return p.Up
			},
		},
		Parallel: true,
		Broker:   "sqs",
		Browse:   transporttest.BrowseOptions{Unordered: true},
		// A limit set low in code (the URL's max_message_size starts at 1024).
		OpenWithLimit: func(t *testing.T, limit int) transport.Transport { return openTest(t, WithMaxMessageSize(limit)) },
		Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
			switch c {
			case transporttest.CaseStats:
				cfg.Prefetch = 1 // exact counts
			case transporttest.CasePublishConfirmed:
				// A standard queue stores the entries of a SendMessageBatch call in no order.
				cfg.UnorderedBatches, cfg.NoKeys = true, true
			}
		},
		Without: map[transporttest.Case]string{
			transporttest.CasePipelined: "SQS's settle writes are not pipelined: SendMessage returns once SQS stored the " +
				"message, and Settle waits for it",
		},
	})
}
