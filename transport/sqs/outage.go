package sqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DefaultPublishWait is how long, by default, Publish and PublishConfirmed wait for an
// SQS endpoint they cannot reach to answer again ([WithPublishWait]).
const DefaultPublishWait = 30 * time.Second

// WithPublishWait sets how long Publish and PublishConfirmed wait for an SQS endpoint
// they cannot reach (the URL's publish_wait; default [DefaultPublishWait]; zero fails at
// once). A publish that finds the endpoint unreachable once the SDK's own retries gave
// up (a connection refused, cut or not answered) waits for it to answer again, asking
// it one cheap question at a time (ListQueues of at most one name, 50 ms doubling to 1 s
// apart), then sends; the publishes that come meanwhile wait the same way instead of
// failing at once. It waits within its context and this bound; past them it fails with
// the cause: an error matching context.DeadlineExceeded (or Canceled) that also wraps
// the last connection error when the context ended first.
//
// The wait never sends a message twice. A request that was written whole and not
// answered may have reached SQS: on a standard queue it is not sent again (that publish
// fails with the cause at once; SQS has no deduplication), on a FIFO queue it is, with
// the same deduplication id, which SQS drops within five minutes. Settle writes do not
// wait: a failed one is the runtime's to rewind.
func WithPublishWait(d time.Duration) Option {
	return func(t *Transport) {
		if d < 0 {
			t.common.Invalid("WithPublishWait", "want zero (no wait) or a positive duration, got %s", d)
			return
		}
		t.publishWait = d
	}
}

// publish makes call, the SendMessage or SendMessageBatch of a publish to queue, and
// rides out an endpoint that cannot be reached ([WithPublishWait]).
func (t *Transport) publish(ctx context.Context, queue string, call func(ctx context.Context, url string) error) error {
	until := time.Now().Add(t.publishWait)
	fifo := strings.HasSuffix(t.QueueName(queue), fifoSuffix)
	var last error // the last connection error of this publish
	for {
		if t.publishWait > 0 && t.unreachable.Load() {
			if err := t.awaitEndpoint(ctx, until, last); err != nil {
				return fmt.Errorf("sqs: send to %q: %w", queue, err)
			}
		}
		var written atomic.Bool
		err := t.withURL(noteWrites(ctx, &written), queue, call)
		var lost *smithyhttp.RequestSendError
		switch {
		case err == nil:
			t.unreachable.Store(false)
			return nil
		case t.publishWait <= 0:
			return err
		case ctx.Err() != nil && (last != nil || errors.As(err, &lost)):
			return fmt.Errorf("sqs: send to %q: %w (last error: %w)", queue, ctx.Err(), cmp.Or(last, err))
		case !errors.As(err, &lost):
			return err
		}
		t.unreachable.Store(true) // the publishes that come meanwhile wait for the endpoint
		if written.Load() && !fifo {
			return fmt.Errorf("%w (a request was sent whole and not answered: SQS may have stored it, so it is not sent again)", err)
		}
		last = err
	}
}

// awaitEndpoint asks the endpoint one cheap question at a time until it answers, ctx
// ends or until passes. last is the caller's last connection error, if any.
func (t *Transport) awaitEndpoint(ctx context.Context, until time.Time, last error) error {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		left := time.Until(until)
		if left <= 0 {
			return fmt.Errorf("the endpoint did not answer within publish_wait %s: %w", t.publishWait, last)
		}
		pctx, cancel := context.WithTimeout(ctx, min(left, 5*time.Second))
		_, err := t.client.ListQueues(pctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1), QueueNamePrefix: aws.String("babelqueue-probe")},
			func(o *awssqs.Options) { o.RetryMaxAttempts = 1 })
		cancel()
		var lost *smithyhttp.RequestSendError
		if err == nil || !errors.As(err, &lost) && pctx.Err() == nil { // any answer will do, a refusal too
			t.unreachable.Store(false)
			return nil
		}
		if last == nil {
			last = err
		}
		timer := time.NewTimer(min(backoff, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w while waiting for the endpoint (last error: %w)", ctx.Err(), last)
		case <-timer.C:
		}
	}
}

// noteWrites returns ctx with an HTTP trace that sets written once a request of the
// SDK's was written whole: one that may have reached SQS.
func noteWrites(ctx context.Context, written *atomic.Bool) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			written.Store(true)
		}
	}})
}
