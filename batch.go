package babelqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// BatchEntry is one message of [App.PublishBatch]: what [App.Publish] takes.
type BatchEntry struct {
	URN     string
	Data    any
	Options []PublishOption
}

// PublishBatch publishes entries with the broker's confirmation and returns their
// meta.ids, in order. Every message is built as [App.Publish] builds it (the options,
// the publish middleware), then the whole batch goes to the transport at once
// ([transport.PublishConfirmed]): RabbitMQ and Artemis confirms in flight together,
// SQS SendMessageBatch, a Redis pipeline, a Kafka produce then flush, Pulsar's
// asynchronous sends. One round trip is paid for the batch instead of one per message.
//
// The result is nil once the broker confirmed every message. Otherwise each message is
// either confirmed or reported: the error is a *[transport.BatchError] (matching
// [transport.ErrNotConfirmed]) whose Errs[i] is nil for a confirmed message and the cause
// for the others, a message that could not be built included (its id is then ""; a
// message sent but not confirmed keeps its id: the broker may hold it all the same). An
// error of another kind (the app is closed, a transport that cannot confirm: matching
// [transport.ErrUnsupported]) means nothing was sent. The middleware sees each message
// before the batch is sent, as for [App.Prepare]; the [PublishHook] sees each one after.
func (a *App) PublishBatch(ctx context.Context, entries []BatchEntry) ([]string, error) {
	a.mu.RLock()
	closed := a.closed
	a.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	ids := make([]string, len(entries))
	errs := make([]error, len(entries))
	outs := make([]*Outgoing, len(entries))
	msgs := make([]*transport.Message, 0, len(entries))
	at := make([]int, 0, len(entries)) // msgs[k] is entry at[k]
	for i, e := range entries {
		out, err := a.outgoing(ctx, e.URN, e.Data, e.Options)
		var m *transport.Message
		if err == nil {
			m, err = a.prepare(ctx, out)
		}
		if err != nil {
			errs[i] = fmt.Errorf("babelqueue: publish %s: %w", e.URN, err)
			continue
		}
		outs[i], ids[i] = out, out.Envelope.Meta.ID
		msgs = append(msgs, m)
		at = append(at, i)
	}
	var start time.Duration
	if len(a.hooks.published) > 0 {
		start = monotonic()
	}
	err := transport.PublishConfirmed(ctx, a.tr, msgs)
	var be *transport.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be) && len(be.Errs) == len(msgs):
		for k, e := range be.Errs {
			if e != nil {
				o := outs[at[k]]
				errs[at[k]] = fmt.Errorf("babelqueue: publish %s to %q: %w", o.Envelope.Job, o.Queue, e)
			}
		}
	case errors.Is(err, transport.ErrUnsupported):
		return nil, err // nothing was sent
	default:
		for _, i := range at {
			o := outs[i]
			errs[i] = fmt.Errorf("babelqueue: publish %s to %q: %w", o.Envelope.Job, o.Queue, err)
		}
	}
	if len(a.hooks.published) > 0 {
		d := monotonic() - start
		for k, i := range at {
			o := outs[i]
			ev := PublishedEvent{Queue: o.Queue, URN: o.Envelope.Job, ID: o.Envelope.Meta.ID, TraceID: o.Envelope.TraceID,
				BodySize: len(msgs[k].Body), Err: errs[i], Duration: d}
			for _, h := range a.hooks.published {
				h.OnPublished(ctx, ev)
			}
		}
	}
	return ids, transport.NewBatchError(errs)
}
