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

	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// DefaultPublishWait is how long, by default, Publish and PublishConfirmed wait for an
// SQS endpoint they cannot reach to answer again ([WithPublishWait]).
const DefaultPublishWait = 30 * time.Second

// WithPublishWait sets how long Publish and PublishConfirmed wait for an SQS endpoint
// they cannot reach to answer again before they fail (publish_wait in the URL; default
// [DefaultPublishWait]; zero fails at once). The wait never sends a message twice: a
// request written whole and not answered is sent again only to a FIFO queue, with the
// same deduplication id. Settle writes do not wait.
func WithPublishWait(d time.Duration) Option {
	return func(t *Transport) { t.common.SetAtLeast("WithPublishWait", &t.publishWait, d, 0) }
}

// publish makes call, a publish's send to queue, riding out an unreachable endpoint.
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

// awaitEndpoint asks the endpoint until it answers, ctx ends or until passes, 50 ms
// doubling to 1 s between; last is the caller's last connection error, if any.
func (t *Transport) awaitEndpoint(ctx context.Context, until time.Time, last error) error {
	for n := 1; ; n++ {
		left := time.Until(until)
		if left <= 0 {
			return fmt.Errorf("the endpoint did not answer within publish_wait %s: %w", t.publishWait, last)
		}
		pctx, cancel := context.WithTimeout(ctx, min(left, 5*time.Second))
		err := answers(pctx, t.client)
		cancel()
		if err == nil {
			t.unreachable.Store(false)
			return nil
		}
		last = cmp.Or(last, err)
		if driverkit.Sleep(ctx, min(awaitBackoff.Delay(n), left)) != nil {
			return fmt.Errorf("%w while waiting for the endpoint (last error: %w)", ctx.Err(), last)
		}
	}
}

var awaitBackoff = driverkit.Backoff{Min: 50 * time.Millisecond, Max: time.Second}

// noteWrites returns ctx with an HTTP trace that sets written once a request was
// written whole: one that may have reached SQS.
func noteWrites(ctx context.Context, written *atomic.Bool) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			written.Store(true)
		}
	}})
}
