package babelqueue

import (
	"context"
	"fmt"

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
// encodes as an object) and returns its meta.id.
func (a *App) Publish(ctx context.Context, urn string, data any, opts ...PublishOption) (string, error) {
	pc := publishConfig{queue: a.cfg.queue}
	for _, o := range opts {
		o(&pc)
	}
	if pc.err != nil {
		return "", pc.err
	}
	a.mu.RLock()
	closed := a.closed
	a.mu.RUnlock()
	if closed {
		return "", ErrClosed
	}
	eopts := []envelope.Option{envelope.WithQueue(pc.queue)}
	if pc.traceID != "" {
		eopts = append(eopts, envelope.WithTraceID(pc.traceID))
	}
	env, err := envelope.Make(urn, data, eopts...)
	if err != nil {
		return "", err
	}
	body, err := env.Encode()
	if err != nil {
		return "", err
	}
	m := &transport.Message{
		Queue:      pc.queue,
		Body:       body,
		Key:        pc.key,
		Headers:    pc.headers,
		Projection: ProjectionOf(env),
	}
	if err := a.tr.Publish(ctx, m); err != nil {
		return "", fmt.Errorf("babelqueue: publish %s to %q: %w", urn, pc.queue, err)
	}
	return env.Meta.ID, nil
}

// ProjectionOf is the projection the runtime hands a transport with every write of e:
// the envelope fields a broker binding of SPEC §7 copies into native properties or
// headers. A transport or its tests use it to project an envelope exactly as the
// runtime does.
func ProjectionOf(e *envelope.Envelope) transport.Projection {
	return transport.Projection{
		URN:           e.Job,
		TraceID:       e.TraceID,
		MessageID:     e.Meta.ID,
		Lang:          e.Meta.Lang,
		SchemaVersion: e.Meta.SchemaVersion,
		CreatedAt:     e.Meta.CreatedAt,
	}
}
