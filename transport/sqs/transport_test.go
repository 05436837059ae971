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

func TestTransportKit(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.Run(t, transporttest.Config{
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
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	})
}

// TestSizeLimitKit runs the kit's size-check case on a transport whose limit is set
// low in code (the URL's max_message_size starts at 1024).
//
// The other entry points of the kit: RunPublishConfirmed (confirm_test.go), RunBrowse
// (browse_test.go) and RunStats (stats_test.go) run in their files. RunPipelinedClose
// and RunRuntimeShutdownWithPipelinedWrites are for drivers whose Settle returns before
// their writes are confirmed: SQS's settle writes are not pipelined (SendMessage returns
// once SQS stored the message, and Settle waits for it).
func TestSizeLimitKit(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.RunSizeLimit(t, transporttest.Config{NewQueue: kitQueues(admin), ReceiveTimeout: 20 * time.Second}, "sqs",
		func(t *testing.T, limit int) transport.Transport { return openTest(t, WithMaxMessageSize(limit)) })
}

func TestRuntimeSettlement(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.RunRuntime(t, transporttest.Config{
		NewQueue: kitQueues(admin),
		Open: func(t *testing.T) transport.Transport {
			return openTest(t)
		},
		TextBodiesOnly:     true,
		NativeRedeliveries: true,
		ReceiveTimeout:     20 * time.Second,
	})
}
