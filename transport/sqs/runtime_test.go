package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// runApp starts a.Run and returns a stop function.
func runApp(t *testing.T, a *babelqueue.App) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

// redriveQueue creates q with a RedrivePolicy (maxReceiveCount 2, visibility 1s) onto
// q-native-dlq, and returns the native DLQ's name.
func redriveQueue(t *testing.T, tr *Transport, q string) string {
	t.Helper()
	native := q + "-native"
	dlqURL := createQueue(t, tr, native, nil)
	createQueue(t, tr, q, map[string]string{
		"VisibilityTimeout": "1",
		"RedrivePolicy":     fmt.Sprintf(`{"maxReceiveCount":"2","deadLetterTargetArn":"%s"}`, queueArn(t, tr, dlqURL)),
	})
	return native
}

// TestRuntimePoisonWithDLQOffReachesNativeDLQ: with the runtime's DLQ off, a poison body
// and a schema-gate rejection are neither retried nor dropped: they are left to the
// queue's RedrivePolicy, which moves them byte for byte to the native DLQ.
func TestRuntimePoisonWithDLQOffReachesNativeDLQ(t *testing.T) {
	t.Parallel()
	tr := openTest(t)
	q := transporttest.UniqueName("bqrtredrive")
	native := redriveQueue(t, tr, q)
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithShutdownGrace(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	a.Handle("urn:babel:test:gated", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
	poison := []byte(`{"job":42,"data":{}}`)
	gated := []byte(`{"job":"urn:babel:test:gated","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`)
	ctx := ctxT(t, 90*time.Second)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: poison}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: gated, Headers: map[string]string{"bq-schema-version": "2"}}); err != nil {
		t.Fatal(err)
	}
	stop := runApp(t, a)
	c := consumeT(t, tr, native, 2)
	got := map[string]bool{}
	for range 2 {
		d := transporttest.Receive(t, c, 30*time.Second)
		got[string(d.Body)] = true
		ack(t, c, d)
	}
	stop()
	if !got[string(poison)] || !got[string(gated)] {
		t.Errorf("native DLQ holds %v, want the poison and the gated body byte for byte", got)
	}
	if handled.Load() != 0 {
		t.Error("a gated delivery reached its handler")
	}
	// Nothing was re-published onto the work queue or a runtime DLQ.
	deleteQueueLater(t, tr, a.DeadLetterQueue())
	for _, name := range []string{q, a.DeadLetterQueue()} {
		rc := consumeT(t, tr, name, 1)
		transporttest.ExpectNothing(t, rc, 2*time.Second)
	}
}

// TestRuntimeFailingHandlerCountsNativeReceives: a message redelivered by SQS itself
// (a worker crashed holding it) counts its receives: attempts = max(body, receives-1).
func TestRuntimeFailingHandlerCountsNativeReceives(t *testing.T) {
	t.Parallel()
	tr := openTest(t)
	q := transporttest.UniqueName("bqrtnative")
	createQueue(t, tr, q, map[string]string{"VisibilityTimeout": "1"})
	ctx := ctxT(t, 60*time.Second)
	body := []byte(`{"job":"urn:babel:test:n","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	// Two receives by a worker that never settles (the raw client, so nothing else
	// polls in between): SQS redelivers after the visibility timeout.
	url := queueURL(t, tr, q)
	for got := 0; got < 2; {
		out, err := rawClient(t, tr).ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5})
		if err != nil {
			t.Fatal(err)
		}
		got += len(out.Messages)
	}
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithShutdownGrace(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan int, 1)
	a.Handle("urn:babel:test:n", func(_ context.Context, m *babelqueue.Message) error {
		select {
		case seen <- m.Attempts:
		default:
		}
		return nil
	})
	stop := runApp(t, a)
	select {
	case n := <-seen:
		if n != 2 {
			t.Errorf("third receive: handler saw attempts %d, want 2", n)
		}
	case <-ctx.Done():
		t.Fatal("the message never reached the handler")
	}
	stop()
}

// TestRepeatedSettleWriteFailureBacksOff: when the dead-letter write keeps failing (SQS
// refuses the queue's name), the message comes back and is handled again, but the
// consumer backs off further each time and logs the cause at each doubling of the
// failures, never once per message.
func TestRepeatedSettleWriteFailureBacksOff(t *testing.T) {
	t.Parallel()
	var logs transporttest.LogBuffer
	tr := openTest(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	q := transporttest.UniqueName("bqbackoff")
	queueURL(t, tr, q)
	deleteQueueLater(t, tr, q)
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithMaxAttempts(1), babelqueue.WithDeadLetter(true),
		babelqueue.WithDeadLetterQueue("no such queue!"), babelqueue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	a.Handle("urn:babel:test:backoff", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	stop := runApp(t, a)
	if _, err := a.Publish(context.Background(), "urn:babel:test:backoff", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "failures=8") {
		if time.Now().After(deadline) {
			t.Fatalf("after %d handler runs no eighth settle failure in a row was logged:\n%s", calls.Load(), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	out := logs.String()
	if n := strings.Count(out, "settle failed; receiving backs off"); n > 4+1 { // failures 1, 2, 4, 8 (and 16)
		t.Errorf("logged %d settle-failure lines for %d handler runs, want one per doubling", n, calls.Load())
	}
	if !strings.Contains(out, "no such queue!") || !strings.Contains(out, "backoff=") {
		t.Errorf("the settle-failure lines do not name the cause and the backoff:\n%s", out)
	}
}
