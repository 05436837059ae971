package babelqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// PublishOption tunes one [App.Publish].
type PublishOption func(*publishConfig)

type publishConfig struct {
	queue   string
	traceID string
	key     []byte
	headers map[string]string
	err     error
}

// ToQueue publishes to queue instead of the app's queue.
func ToQueue(queue string) PublishOption {
	return func(p *publishConfig) {
		if queue == "" {
			p.err = fmt.Errorf("%w: ToQueue with an empty queue", ErrInvalidOption)
		}
		p.queue = queue
	}
}

// ContinueTrace carries traceID into the new envelope instead of minting one; pass
// the TraceID of the message being handled.
func ContinueTrace(traceID string) PublishOption {
	return func(p *publishConfig) { p.traceID = traceID }
}

// WithKey sets the record key (Kafka, Pulsar; the message group on SQS FIFO). A nil key
// is no key; an empty non-nil key is an empty key.
func WithKey(key []byte) PublishOption {
	return func(p *publishConfig) {
		if key == nil {
			p.key = nil
			return
		}
		p.key = append([]byte{}, key...)
	}
}

// WithHeaders adds out-of-band string headers (a W3C traceparent, a tenant). They
// travel beside the envelope, never inside it.
func WithHeaders(h map[string]string) PublishOption {
	return func(p *publishConfig) {
		if p.headers == nil {
			p.headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			p.headers[k] = v
		}
	}
}

// Publish sends a new envelope for urn with data (any JSON-marshalable value that
// encodes as an object) and returns its meta.id. Called with a handler's context, it
// continues the trace of the message being handled unless [ContinueTrace] says
// otherwise. Publish middleware ([App.UsePublish]) runs first.
func (a *App) Publish(ctx context.Context, urn string, data any, opts ...PublishOption) (string, error) {
	out, err := a.outgoing(ctx, urn, data, opts)
	if err != nil {
		return "", err
	}
	a.mu.RLock()
	publish := a.publish
	a.mu.RUnlock()
	if err := publish(ctx, out); err != nil {
		return "", err
	}
	return out.Envelope.Meta.ID, nil
}

// Prepare runs everything [App.Publish] runs (the envelope, the options, the publish
// middleware) but returns the message the transport would have been given instead of
// sending it: the transactional outbox stores it and its relay publishes it later,
// exactly as Publish would have.
func (a *App) Prepare(ctx context.Context, urn string, data any, opts ...PublishOption) (*transport.Message, error) {
	out, err := a.outgoing(ctx, urn, data, opts)
	if err != nil {
		return nil, err
	}
	return a.prepare(ctx, out)
}

// prepare runs the publish middleware on out and returns the wire message instead of
// sending it.
func (a *App) prepare(ctx context.Context, out *Outgoing) (*transport.Message, error) {
	a.mu.RLock()
	mw := a.pubMW
	a.mu.RUnlock()
	var msg *transport.Message
	capture := func(_ context.Context, o *Outgoing) error {
		m, err := wireMessage(o)
		msg = m
		return err
	}
	if err := chainPublish(capture, mw)(ctx, out); err != nil {
		return nil, err
	}
	return msg, nil
}

func (a *App) outgoing(ctx context.Context, urn string, data any, opts []PublishOption) (*Outgoing, error) {
	pc := publishConfig{queue: a.cfg.queue}
	if len(opts) > 0 {
		pc = pc.with(opts)
	}
	if pc.err != nil {
		return nil, pc.err
	}
	a.mu.RLock()
	closed := a.closed
	a.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if pc.traceID == "" {
		if m := MessageFromContext(ctx); m != nil {
			pc.traceID = m.Envelope.TraceID
		}
	}
	eopts := []envelope.Option{envelope.WithQueue(pc.queue)}
	if pc.traceID != "" {
		eopts = append(eopts, envelope.WithTraceID(pc.traceID))
	}
	env, err := envelope.Make(urn, data, eopts...)
	if err != nil {
		return nil, err
	}
	// Headers stay nil without WithHeaders: the publish chain gives middleware a map.
	return &Outgoing{Envelope: env, Queue: pc.queue, Key: pc.key, Headers: pc.headers}, nil
}

// with returns pc with opts applied. The options are applied to a copy, so that a
// publish without options keeps its config on the stack.
func (pc publishConfig) with(opts []PublishOption) publishConfig {
	for _, o := range opts {
		o(&pc)
	}
	return pc
}

// wireMessage encodes an outgoing message for the transport.
func wireMessage(o *Outgoing) (*transport.Message, error) {
	body, err := o.Envelope.Encode()
	if err != nil {
		return nil, err
	}
	headers := o.Headers
	if len(headers) == 0 {
		headers = nil
	}
	return &transport.Message{
		Queue:      o.Queue,
		Body:       body,
		Key:        o.Key,
		Headers:    headers,
		Projection: transport.ProjectionOf(o.Envelope),
		Owned:      true, // body is this message's own; Key is WithKey's copy
	}, nil
}

// send is the end of the publish chain: encode, hand to the transport, tell the hooks.
func (a *App) send(ctx context.Context, o *Outgoing) error {
	m, err := wireMessage(o)
	if err != nil {
		return err
	}
	var start time.Duration
	if len(a.hooks.published) > 0 {
		start = monotonic()
	}
	err = a.tr.Publish(ctx, m)
	if err != nil {
		err = fmt.Errorf("babelqueue: publish %s to %q: %w", o.Envelope.Job, o.Queue, err)
	}
	if len(a.hooks.published) > 0 {
		ev := PublishedEvent{
			Queue: o.Queue, URN: o.Envelope.Job, ID: o.Envelope.Meta.ID, TraceID: o.Envelope.TraceID,
			BodySize: len(m.Body), Err: err, Duration: monotonic() - start,
		}
		for _, h := range a.hooks.published {
			h.OnPublished(ctx, ev)
		}
	}
	return err
}

// monotonicBase is the instant [monotonic] counts from.
var monotonicBase = time.Now()

// monotonic is the time elapsed on the monotonic clock since the program started: a
// duration's two ends read this way cost one clock read each where time.Now costs two
// (the wall clock too).
func monotonic() time.Duration { return time.Since(monotonicBase) }
