package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// publishThroughCut publishes one message after the other, each with a context of 20 s,
// while ElasticMQ is taken away from tr for 5 s (the fault proxy cuts every connection
// and refuses new ones) and for 2 s after it is back. It returns the bodies whose
// Publish returned nil, the errors of the others, and the longest Publish.
func publishThroughCut(t *testing.T, tr *Transport, q string) (sent [][]byte, failed []error, longest time.Duration) {
	t.Helper()
	p := proxyOf(t, tr)
	if err := tr.Publish(ctxT(t, 20*time.Second), &transport.Message{Queue: q, Body: []byte(`{"n":"before"}`)}); err != nil {
		t.Fatal(err)
	}
	sent = append(sent, []byte(`{"n":"before"}`))
	p.Down()
	up := time.AfterFunc(5*time.Second, p.Up)
	defer up.Stop()
	start := time.Now()
	for i := 0; time.Since(start) < 7*time.Second; i++ {
		body := fmt.Appendf(nil, `{"n":%d}`, i)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		began := time.Now()
		err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Projection: transport.Projection{MessageID: fmt.Sprintf("m-%d", i)}})
		cancel()
		longest = max(longest, time.Since(began))
		if err != nil {
			failed = append(failed, err)
			continue
		}
		sent = append(sent, body)
	}
	return sent, failed, longest
}

// drainOnce receives every message of q and fails the test when one comes twice or one
// of want is missing.
func drainOnce(t *testing.T, tr *Transport, q string, want [][]byte) {
	t.Helper()
	c := consumeT(t, tr, q, 10)
	seen := map[string]int{}
	for range want {
		d := transporttest.Receive(t, c, 20*time.Second)
		seen[string(d.Body)]++
		ack(t, c, d)
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	for _, b := range want {
		if seen[string(b)] != 1 {
			t.Errorf("%s is on the queue %d times, want once", b, seen[string(b)])
		}
	}
}

// TestPublishRidesOutACut (issue 38): a publisher looping over Publish through a 5 s
// cut of a standard queue waits for the endpoint instead of failing at once: at most
// the publish in flight when the cut came fails (its request was written and not
// answered, so SQS may have stored it: it is not sent again), with the connection
// error; every other one returns nil once ElasticMQ is back, and each of those is on
// the queue exactly once.
func TestPublishRidesOutACut(t *testing.T) {
	t.Parallel()
	tr, _ := openProxied(t, "")
	q := transporttest.UniqueName("bqcut")
	queueURL(t, tr, q)
	deleteQueueLater(t, tr, q)
	sent, failed, longest := publishThroughCut(t, tr, q)
	if len(failed) > 1 {
		t.Fatalf("%d publishes failed during a 5 s cut, want at most the one in flight: %v", len(failed), failed)
	}
	for _, err := range failed {
		var lost *smithyhttp.RequestSendError
		if !errors.As(err, &lost) || !strings.Contains(err.Error(), "not sent again") {
			t.Errorf("the failed publish = %v, want the connection error, saying it was not sent again", err)
		}
	}
	if longest < 3*time.Second {
		t.Errorf("the longest Publish took %s: nothing waited through the cut", longest)
	}
	drainOnce(t, tr, q, sent)
}

// TestPublishRidesOutACutOnFIFO: on a FIFO queue even the publish in flight when the
// cut came is sent again once the endpoint answers (under the same deduplication id), so
// no publish fails and each message is on the queue once.
func TestPublishRidesOutACutOnFIFO(t *testing.T) {
	t.Parallel()
	tr, _ := openProxied(t, "fifo=1")
	q := transporttest.UniqueName("bqcutfifo")
	queueURL(t, tr, q)
	deleteQueueLater(t, tr, q)
	sent, failed, _ := publishThroughCut(t, tr, q)
	if len(failed) > 0 {
		t.Fatalf("%d publishes to a FIFO queue failed during a 5 s cut, want none: %v", len(failed), failed)
	}
	drainOnce(t, tr, q, sent)
}

// TestPublishWaitIsBounded: an endpoint that does not come back fails a publish after
// publish_wait with the connection error, and a publish whose context ends first fails
// with an error matching context.DeadlineExceeded that wraps the connection error too.
// Nothing is sent once the endpoint is back.
func TestPublishWaitIsBounded(t *testing.T) {
	t.Parallel()
	tr, p := openProxied(t, "fifo=1&publish_wait=1s")
	long := openProxiedWith(t, p, "fifo=1&publish_wait=1m")
	q := transporttest.UniqueName("bqwait")
	queueURL(t, tr, q)
	queueURL(t, long, q)
	deleteQueueLater(t, tr, q)
	p.Down()
	began := time.Now()
	err := tr.Publish(ctxT(t, 30*time.Second), &transport.Message{Queue: q, Body: []byte(`{"n":"bounded"}`), Projection: transport.Projection{MessageID: "bounded"}})
	var lost *smithyhttp.RequestSendError
	if !errors.As(err, &lost) || !strings.Contains(err.Error(), "1s (publish_wait)") {
		t.Errorf("Publish past publish_wait = %v, want the connection error, naming publish_wait", err)
	}
	if took := time.Since(began); took < time.Second {
		t.Errorf("Publish failed after %s, before publish_wait", took)
	}

	long.unreachable.Store(true) // as after a publish that found the endpoint gone
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = long.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":"context"}`), Projection: transport.Projection{MessageID: "context"}})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &lost) {
		t.Errorf("Publish whose context ended = %v, want context.DeadlineExceeded wrapping the connection error", err)
	}
	p.Up()
	transporttest.ExpectNothing(t, consumeT(t, tr, q, 1), 2*time.Second)
}
