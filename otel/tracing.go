// Package otel traces a BabelQueue app with OpenTelemetry as every SDK of the family
// does (SPEC §8.4), so one trace follows a job from a Python producer through a Go
// consumer and on: a PRODUCER span per publish, a CONSUMER span per delivery handled,
// and a span for each settlement that is not a plain acknowledgement (a retry, a
// dead-letter write, a release, a drop, a rewind).
//
// Spans are linked across languages two ways, byte for byte as the family does it:
//
//   - The producer writes W3C traceparent and tracestate as out-of-band transport headers;
//     a consumer that finds a valid traceparent starts its span as that span's child.
//   - Without one (a producer that does not trace, a header the broker dropped) the
//     consumer starts under a remote parent derived from the envelope's trace_id
//     ([RemoteParent]): the trace id is [TraceIDOf](trace_id), so every consumer of one
//     trace_id, in any language, lands in the same trace.
//
// A retry re-publish and a dead-letter write keep the delivery's headers, so the next
// attempt and a redriven message stay children of the original producer span; the span
// of the write itself is a child of the delivery's CONSUMER span. A handler's own
// [babelqueue.App.Publish] with its context starts its PRODUCER span under the CONSUMER
// span, and [babelqueue.App.Prepare] (the transactional outbox) stores the traceparent
// its relay later publishes.
//
// The metrics the family has no SDK for are in the metrics package beside this one.
package otel

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
)

// ScopeName is the instrumentation scope of the spans and metrics of this module.
const ScopeName = "github.com/babelqueue-go/babelqueue/otel"

// The out-of-band headers that carry W3C Trace Context beside the envelope, as every SDK
// of the family names them.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// System is the messaging.system of every span: the family's value.
const System = "babelqueue"

// The attributes this module adds to the messaging semantic conventions. The attempts
// key is the family's (the Python SDK writes it too).
const (
	AttrAttempts     = attribute.Key("messaging.babelqueue.attempts")
	AttrURN          = attribute.Key("messaging.babelqueue.urn")
	AttrLang         = attribute.Key("messaging.babelqueue.lang")
	AttrKind         = attribute.Key("messaging.babelqueue.settle.kind")
	AttrAction       = attribute.Key("messaging.babelqueue.settle.action")
	AttrReason       = attribute.Key("messaging.babelqueue.settle.reason")
	AttrDelay        = attribute.Key("messaging.babelqueue.settle.delay_ms")
	AttrRequeueAfter = attribute.Key("messaging.babelqueue.requeue_after_ms")
	AttrNoRetry      = attribute.Key("messaging.babelqueue.no_retry")
	// attrOperation is messaging.operation, the name the family's SDKs still write beside
	// the current messaging.operation.type and messaging.operation.name.
	attrOperation = attribute.Key("messaging.operation")
)

// Option configures [NewTracing].
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the tracer provider (default: the global one,
// otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithPropagator sets the propagator that writes and reads the trace headers (default:
// W3C Trace Context, the family's traceparent and tracestate). A composite one can add
// baggage; the family's SDKs read only traceparent and tracestate.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.prop = p
		}
	}
}

// Tracing makes the spans of one or more apps. Install all three parts on each app: it
// is an [babelqueue.Observer] (for the settlement spans), its [Tracing.Middleware] makes
// the CONSUMER spans and its [Tracing.PublishMiddleware] the PRODUCER spans:
//
//	tr := otel.NewTracing(otel.WithTracerProvider(tp))
//	app, err := babelqueue.Open(ctx, url, babelqueue.WithObserver(tr))
//	...
//	tr.Instrument(app) // app.Use(tr.Middleware()); app.UsePublish(tr.PublishMiddleware())
//
// Its methods are safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// w3c is set when prop is W3C Trace Context: the PRODUCER span's context is then
	// written straight from the span and a delivery's read straight from its headers
	// (the propagator's Inject and Extract give the same).
	w3c bool
	// observed is set once the Tracing is told of a delivery as an observer: from then
	// on its middleware keeps each recorded CONSUMER span here, by message, until the
	// settlement hook takes it (it is told of every delivery the middleware saw).
	observed atomic.Bool
	spans    sync.Map     // *babelqueue.Message → trace.SpanContext
	kept     atomic.Int64 // entries in spans: none to look up while nothing is recorded

	// Span names, built once per URN (both are bounded: the URNs of the app's handlers,
	// the URNs its code publishes).
	processNames, publishNames names
}

// The start options of the spans, made once. The messaging attributes are set once a
// span is known to be recorded, so a sampled-out span costs no attribute work.
var (
	consumerStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	producerStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// names caches the span names "<verb> <urn>".
type names struct {
	verb string
	m    atomic.Pointer[map[string]string]
	mu   sync.Mutex
}

func (n *names) of(urn string) string {
	if m := n.m.Load(); m != nil {
		if name, ok := (*m)[urn]; ok {
			return name
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	next := map[string]string{}
	if m := n.m.Load(); m != nil {
		maps.Copy(next, *m)
	}
	name := n.verb + " " + urn
	next[urn] = name
	n.m.Store(&next)
	return name
}

// NewTracing returns a Tracing.
func NewTracing(opts ...Option) *Tracing {
	c := config{prop: propagation.TraceContext{}}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	_, w3c := c.prop.(propagation.TraceContext)
	return &Tracing{
		tracer: c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(babelqueue.Version),
			trace.WithSchemaURL(semconv.SchemaURL)),
		prop:         c.prop,
		w3c:          w3c,
		processNames: names{verb: "process"},
		publishNames: names{verb: "publish"},
	}
}

// Instrument adds the Tracing's middleware to app ([babelqueue.App.Use]) and its publish
// middleware ([babelqueue.App.UsePublish]). The app must also have been given the Tracing
// as an observer ([babelqueue.WithObserver]) for the settlement spans.
func (t *Tracing) Instrument(app *babelqueue.App) {
	app.Use(t.Middleware())
	app.UsePublish(t.PublishMiddleware())
}

// Middleware makes a CONSUMER span "process <urn>" around the handler, a child of the
// span named by the message's traceparent header, else of [RemoteParent](trace_id). The
// handler's context carries the span: its own spans and publishes are its children. A
// handler error, a [babelqueue.NoRetry] and a panic set the span's status to Error; a
// [babelqueue.Requeue] does not.
func (t *Tracing) Middleware() babelqueue.Middleware {
	return func(next babelqueue.Handler) babelqueue.Handler {
		return func(ctx context.Context, m *babelqueue.Message) (err error) {
			ctx, span := t.tracer.Start(t.consumerParent(ctx, m), t.processNames.of(m.URN()), consumerStart...)
			if span.IsRecording() {
				env := m.Envelope
				span.SetAttributes(messagingAttrs("process", semconv.MessagingOperationTypeProcess, m.Queue, env, env.Meta.Lang, m.Attempts,
					semconv.MessagingMessageBodySize(len(env.Raw())))...)
				if t.observed.Load() {
					t.kept.Add(1)
					t.spans.Store(m, span.SpanContext())
				}
			}
			defer func() {
				if r := recover(); r != nil {
					fail(span, &babelqueue.PanicError{Value: r})
					span.End()
					panic(r)
				}
				endHandler(span, err)
				span.End()
			}()
			return next(ctx, m)
		}
	}
}

// messagingAttrs are the attributes of a recorded PRODUCER or CONSUMER span: the
// messaging semantic conventions and the family's own, then extra.
func messagingAttrs(op string, opType attribute.KeyValue, queue string, env *envelope.Envelope, lang string, attempts int, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append(append(make([]attribute.KeyValue, 0, 10+len(extra)),
		semconv.MessagingSystemKey.String(System),
		opType,
		semconv.MessagingDestinationName(queue),
		attrOperation.String(op),
		semconv.MessagingOperationName(op),
		semconv.MessagingMessageID(env.Meta.ID),
		semconv.MessagingMessageConversationID(env.TraceID),
		AttrURN.String(env.Job),
		AttrLang.String(lang),
		AttrAttempts.Int(attempts),
	), extra...)
}

// consumerParent is ctx with the remote parent of a delivery's CONSUMER span.
func (t *Tracing) consumerParent(ctx context.Context, m *babelqueue.Message) context.Context {
	return t.remoteParent(ctx, messageCarrier{m}, m.TraceID())
}

// remoteParent is ctx with the span named by the headers in carrier, else the one
// derived from traceID, else no parent (a new trace).
func (t *Tracing) remoteParent(ctx context.Context, carrier propagation.TextMapCarrier, traceID string) context.Context {
	if t.w3c {
		if sc := extractW3C(carrier); sc.IsValid() && !sc.Equal(trace.SpanContextFromContext(ctx)) {
			return withRemoteParent(ctx, sc)
		}
	} else if extracted := t.prop.Extract(ctx, carrier); extracted != ctx {
		if sc := trace.SpanContextFromContext(extracted); sc.IsValid() && !sc.Equal(trace.SpanContextFromContext(ctx)) {
			return extracted
		}
	}
	if traceID != "" {
		return withRemoteParent(ctx, RemoteParent(traceID))
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	return ctx
}

func endHandler(span trace.Span, err error) {
	if err == nil {
		return
	}
	var requeue *babelqueue.RequeueError
	if errors.As(err, &requeue) {
		span.SetAttributes(AttrRequeueAfter.Int64(requeue.After.Milliseconds()))
		return
	}
	var noRetry *babelqueue.NoRetryError
	if errors.As(err, &noRetry) {
		span.SetAttributes(AttrNoRetry.Bool(true))
	}
	fail(span, err)
}

// fail records err on span and sets its status to Error.
func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(strings.TrimPrefix(fmt.Sprintf("%T", err), "*")))
}

// PublishMiddleware makes a PRODUCER span "publish <urn>" around every publish and
// writes its context as traceparent (and tracestate) into the outgoing headers. Its
// parent is the span in ctx (a handler's CONSUMER span, a request's span); with none, the
// span derived from the new envelope's trace_id ([RemoteParent]), so the producer and
// every consumer of that trace_id share one trace whether or not the headers arrive.
// The envelope itself is never changed.
func (t *Tracing) PublishMiddleware() babelqueue.PublishMiddleware {
	return func(next babelqueue.PublishFunc) babelqueue.PublishFunc {
		return func(ctx context.Context, o *babelqueue.Outgoing) error {
			env := o.Envelope
			parent := ctx
			if !trace.SpanContextFromContext(ctx).IsValid() && env.TraceID != "" {
				parent = withRemoteParent(ctx, RemoteParent(env.TraceID))
			}
			ctx, span := t.tracer.Start(parent, t.publishNames.of(env.Job), producerStart...)
			defer span.End()
			if span.IsRecording() {
				span.SetAttributes(messagingAttrs("publish", semconv.MessagingOperationTypeSend, o.Queue, env, envelope.Lang, env.Attempts)...)
				ctx = context.WithValue(ctx, producerKey{}, span)
			}
			if t.w3c {
				injectW3C(span.SpanContext(), o.Headers)
			} else {
				t.prop.Inject(ctx, propagation.MapCarrier(o.Headers))
			}
			err := next(ctx, o)
			if err != nil {
				fail(span, err)
			}
			return err
		}
	}
}

// injectW3C writes sc into headers as W3C Trace Context, the bytes
// propagation.TraceContext's Inject writes, without its way through the context and a
// carrier.
func injectW3C(sc trace.SpanContext, headers map[string]string) {
	if !sc.IsValid() {
		return
	}
	if ts := sc.TraceState().String(); ts != "" {
		headers[HeaderTracestate] = ts
	}
	// Version 00, the trace id, the span id and the flags the specification defines:
	// sampled and random.
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	headers[HeaderTraceparent] = string(b[:])
}

// producerKey marks the context of a recorded PRODUCER span, so OnPublished adds the
// body size to that span and no other.
type producerKey struct{}

// OnPublished adds the encoded body's size to the publish's PRODUCER span (the envelope
// is encoded after the publish middleware runs). It is part of the observer.
func (t *Tracing) OnPublished(ctx context.Context, e babelqueue.PublishedEvent) {
	if span, ok := ctx.Value(producerKey{}).(trace.Span); ok {
		span.SetAttributes(semconv.MessagingMessageBodySize(e.BodySize))
	}
}

// OnReceive is part of the observer: it tells the middleware that settlement spans will
// be made.
func (t *Tracing) OnReceive(context.Context, babelqueue.DeliveryInfo) {
	if !t.observed.Load() {
		t.observed.Store(true)
	}
}

// OnSettled makes the span of a settlement that is not a plain acknowledgement: "<action>
// <urn>" (for a poison body "<action> <queue>"), a PRODUCER span when the settlement
// wrote a message (a retry, a release, a dead-letter write), an INTERNAL one otherwise (a
// drop, a hand-off, a rewind). It is a child of the delivery's CONSUMER span; for a
// delivery no handler ran (an unknown URN, a poison body, a schema-version rejection) a
// child of the delivery's remote parent, with the cause recorded. A settlement the broker
// did not confirm has status Error. When the CONSUMER span was sampled out no settlement
// span is made. It is part of the observer.
func (t *Tracing) OnSettled(ctx context.Context, e babelqueue.SettledEvent) {
	var (
		consumer trace.SpanContext
		found    bool
	)
	if t.kept.Load() > 0 {
		if m := babelqueue.MessageFromContext(ctx); m != nil {
			if v, ok := t.spans.LoadAndDelete(m); ok {
				t.kept.Add(-1)
				consumer, found = v.(trace.SpanContext), true
			}
		}
	}
	if e.Action == babelqueue.ActionAck && e.Err == nil {
		return
	}
	var parent context.Context
	switch {
	case found:
		parent = trace.ContextWithSpanContext(ctx, consumer)
	case handlerRan(e.Kind):
		return // sampled out, or this handler is not traced
	default:
		parent = t.remoteParent(ctx, propagation.MapCarrier(e.Delivery.Headers), e.Delivery.TraceID)
	}
	d := e.Delivery
	name := d.URN
	if name == "" || d.Rejected {
		name = d.Queue
	}
	kind, dest := trace.SpanKindInternal, d.Queue
	if len(e.Writes) > 0 {
		kind, dest = trace.SpanKindProducer, e.Writes[0].Queue
	}
	now := time.Now()
	_, span := t.tracer.Start(parent, string(e.Action)+" "+name,
		trace.WithSpanKind(kind), trace.WithTimestamp(now.Add(-e.Duration)),
		trace.WithAttributes(semconv.MessagingSystemKey.String(System), semconv.MessagingOperationTypeSettle,
			semconv.MessagingDestinationName(dest)))
	if span.IsRecording() {
		span.SetAttributes(settleAttrs(d, string(e.Action), e.Attempts, e.Kind,
			semconv.MessagingMessageBodySize(d.BodySize), AttrAction.String(string(e.Action)))...)
		if e.Reason != "" {
			span.SetAttributes(AttrReason.String(e.Reason))
		}
		if len(e.Writes) > 0 && e.Writes[0].Delay > 0 {
			span.SetAttributes(AttrDelay.Int64(e.Writes[0].Delay.Milliseconds()))
		}
		if !found && e.Cause != nil {
			span.RecordError(e.Cause)
		}
		if e.Err != nil {
			fail(span, e.Err)
		}
	}
	span.End(trace.WithTimestamp(now))
}

// OnSettleFailed makes an error span "settle_failed <urn>" (for a poison body
// "settle_failed <queue>") for a pipelined settlement whose writes failed after it was
// reported and its span ended: the delivery is given back and comes again. The span is a
// child of the delivery's remote parent (its traceparent, else the parent derived from
// trace_id), so it sits in the message's trace beside the attempts. It is part of the
// observer.
func (t *Tracing) OnSettleFailed(ctx context.Context, e babelqueue.SettleFailedEvent) {
	d := e.Delivery
	name := d.URN
	if name == "" || d.Rejected {
		name = d.Queue
	}
	dest := d.Queue
	if len(e.Writes) > 0 {
		dest = e.Writes[0].Queue
	}
	parent := t.remoteParent(ctx, propagation.MapCarrier(d.Headers), d.TraceID)
	_, span := t.tracer.Start(parent, "settle_failed "+name, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemKey.String(System), semconv.MessagingOperationTypeSettle,
			semconv.MessagingDestinationName(dest)))
	if span.IsRecording() {
		span.SetAttributes(settleAttrs(d, "settle_failed", d.Attempts, e.Kind)...)
		if e.Err != nil {
			fail(span, e.Err)
		}
	}
	span.End()
}

// settleAttrs are the attributes of a recorded settlement span of d: the operation
// named name, the attempts and the kind, then extra.
func settleAttrs(d babelqueue.DeliveryInfo, name string, attempts int, kind babelqueue.Kind, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		attrOperation.String("settle"),
		semconv.MessagingOperationName(name),
		semconv.MessagingMessageID(d.ID),
		semconv.MessagingMessageConversationID(d.TraceID),
		AttrURN.String(d.URN),
		AttrLang.String(d.Lang),
		AttrAttempts.Int(attempts),
		AttrKind.String(string(kind)),
	}, extra...)
}

// handlerRan reports the kinds of delivery whose handler ran (under the middleware).
func handlerRan(k babelqueue.Kind) bool {
	switch k {
	case babelqueue.KindHandled, babelqueue.KindFailed, babelqueue.KindUnretryable, babelqueue.KindRequeued:
		return true
	}
	return false
}

// messageCarrier reads a message's headers for a propagator.
type messageCarrier struct{ m *babelqueue.Message }

func (c messageCarrier) Get(key string) string { return c.m.Header(key) }
func (c messageCarrier) Set(string, string)    {}
func (c messageCarrier) Keys() []string {
	h := c.m.Headers()
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
