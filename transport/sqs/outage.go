package sqs

import (
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

// publish makes call, a publish's send to queue, riding out an unreachable endpoint
// ([driverkit.RideOut], 50 ms doubling to 1 s between tries). Once a publish found the
// endpoint unreachable, every publish first asks it one cheap question ([answers]) and
// sends only once it answers. A request written whole and not answered is sent again
// only to a FIFO queue (with the same deduplication id).
func (t *Transport) publish(ctx context.Context, queue string, call func(ctx context.Context, url string) error) error {
	fifo := strings.HasSuffix(t.QueueName(queue), fifoSuffix)
	var written atomic.Bool // a request was written whole: SQS may have stored it
	unanswered := false     // the last try's question went unanswered: nothing was sent
	write := func(ctx context.Context) error {
		if unanswered = t.publishWait > 0 && t.unreachable.Load(); unanswered {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := answers(pctx, t.client); err != nil {
				return fmt.Errorf("sqs: send to %q: the endpoint does not answer: %w", queue, err)
			}
			unanswered = false
		}
		err := t.withURL(noteWrites(ctx, &written), queue, call)
		var lost *smithyhttp.RequestSendError
		t.unreachable.Store(errors.As(err, &lost)) // the publishes that come meanwhile wait for the endpoint
		return err
	}
	unsent := func(err error) bool {
		var lost *smithyhttp.RequestSendError
		return unanswered || errors.As(err, &lost) && (fifo || !written.Load())
	}
	err := driverkit.RideOut(ctx, "sqs", t.publishWait, awaitBackoff, unsent, write)
	var lost *smithyhttp.RequestSendError
	if t.publishWait > 0 && !fifo && written.Load() && errors.As(err, &lost) {
		return fmt.Errorf("%w (a request was sent whole and not answered: SQS may have stored it, so it is not sent again)", err)
	}
	return err
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
