package sqs

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

// testURL is the ElasticMQ URL from BQ_SQS_URL (fails under CI=true when missing).
func testURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_SQS_URL", "sqs")
}

// openTest opens a transport on the test broker; the test's cleanup closes it.
func openTest(t testing.TB, opts ...Option) *Transport {
	t.Helper()
	raw := testURL(t)
	// A short long-poll keeps consumer Close (which waits for it) quick in tests.
	return openTestURL(t, raw, append([]Option{WithWaitTime(time.Second)}, opts...)...)
}

func openTestURL(t testing.TB, raw string, opts ...Option) *Transport {
	t.Helper()
	setTestCredentials(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Open(ctx, raw, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// setTestCredentials gives the default AWS chain the emulator's dummy keys when the
// environment has none, so the tests never reach for real credentials.
func setTestCredentials(t testing.TB) {
	t.Helper()
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		if tt, ok := t.(*testing.T); ok {
			tt.Setenv("AWS_ACCESS_KEY_ID", "x")
			tt.Setenv("AWS_SECRET_ACCESS_KEY", "x")
		} else {
			os.Setenv("AWS_ACCESS_KEY_ID", "x")
			os.Setenv("AWS_SECRET_ACCESS_KEY", "x")
		}
	}
}

// rawClient is the transport's own client, for checks that look at the broker directly.
func rawClient(t testing.TB, tr *Transport) *awssqs.Client {
	t.Helper()
	c, ok := tr.client.(*awssqs.Client)
	if !ok {
		t.Fatal("transport does not wrap an *sqs.Client")
	}
	return c
}

// queueURL resolves (and creates) a queue through the transport.
func queueURL(t testing.TB, tr *Transport, queue string) string {
	t.Helper()
	u, err := tr.QueueURL(context.Background(), queue)
	if err != nil {
		t.Fatalf("QueueURL(%q): %v", queue, err)
	}
	return u
}

// deleteQueueLater removes a queue at the end of the test.
func deleteQueueLater(t testing.TB, tr *Transport, queue string) {
	t.Helper()
	t.Cleanup(func() {
		tr.urlMu.RLock()
		u, ok := tr.urls[tr.QueueName(queue)]
		tr.urlMu.RUnlock()
		if ok {
			_, _ = rawClient(t, tr).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
}
