package otel

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// withRemoteParent is trace.ContextWithRemoteSpanContext(ctx, sc) in one allocation
// instead of two (a span wrapping sc, then a context holding it): the context answers
// the tracing API's own key with a non-recording span that is part of it. The key is
// learnt from trace.SpanFromContext once and the result checked then; should a later
// version of the API find spans another way, the API's own function is used.
func withRemoteParent(ctx context.Context, sc trace.SpanContext) context.Context {
	if spanKey == nil {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	p := &parentContext{Context: ctx}
	p.span.sc = sc.WithRemote(true)
	return p
}

// parentContext is a context whose current span is span, a remote parent.
type parentContext struct {
	context.Context
	span remoteSpan
}

// Value returns the parent span for the tracing API's key, else asks the parent context.
func (p *parentContext) Value(key any) any {
	if key == spanKey {
		return &p.span
	}
	return p.Context.Value(key)
}

// remoteSpan is the non-recording span of a remote span context, as the one
// trace.ContextWithSpanContext makes: every method but SpanContext does nothing.
type remoteSpan struct {
	embedded.Span
	sc trace.SpanContext
}

func (s *remoteSpan) SpanContext() trace.SpanContext        { return s.sc }
func (*remoteSpan) End(...trace.SpanEndOption)              {}
func (*remoteSpan) AddEvent(string, ...trace.EventOption)   {}
func (*remoteSpan) AddLink(trace.Link)                      {}
func (*remoteSpan) IsRecording() bool                       { return false }
func (*remoteSpan) RecordError(error, ...trace.EventOption) {}
func (*remoteSpan) SetStatus(codes.Code, string)            {}
func (*remoteSpan) SetName(string)                          {}
func (*remoteSpan) SetAttributes(...attribute.KeyValue)     {}
func (*remoteSpan) TracerProvider() trace.TracerProvider    { return noop.NewTracerProvider() }

// spanKey is the key under which the tracing API keeps a context's span, or nil when it
// could not be learnt and checked.
var spanKey any

func init() { spanKey = learnSpanKey() }

// learnSpanKey asks trace.SpanFromContext for a span and returns the one key it looked
// up, once a context answering it is checked to give what the API's own
// ContextWithRemoteSpanContext gives; nil otherwise.
func learnSpanKey() any {
	probe := &keyProbe{Context: context.Background()}
	trace.SpanFromContext(probe)
	if len(probe.keys) != 1 || probe.keys[0] == nil {
		return nil
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	spanKey = probe.keys[0]
	defer func() { spanKey = nil }()
	p := withRemoteParent(context.Background(), sc).(*parentContext)
	want := trace.SpanFromContext(trace.ContextWithRemoteSpanContext(context.Background(), sc))
	got := trace.SpanFromContext(p)
	if got != trace.Span(&p.span) || !got.SpanContext().Equal(want.SpanContext()) || got.IsRecording() != want.IsRecording() {
		return nil
	}
	return probe.keys[0]
}

// keyProbe records the keys a context is asked for.
type keyProbe struct {
	context.Context
	keys []any
}

func (k *keyProbe) Value(key any) any {
	k.keys = append(k.keys, key)
	return nil
}

// extractW3C reads W3C Trace Context from carrier as propagation.TraceContext's Extract
// does (the same checks, the same span context), without a context around it: the
// invalid span context when there is no usable traceparent.
func extractW3C(carrier propagation.TextMapCarrier) trace.SpanContext {
	h := carrier.Get(HeaderTraceparent)
	if h == "" {
		return trace.SpanContext{}
	}
	var ver [1]byte
	if !extractPart(ver[:], &h, 2) || ver[0] == 0xff {
		return trace.SpanContext{}
	}
	var scc trace.SpanContextConfig
	var opts [1]byte
	if !extractPart(scc.TraceID[:], &h, 32) || !extractPart(scc.SpanID[:], &h, 16) || !extractPart(opts[:], &h, 2) {
		return trace.SpanContext{}
	}
	if ver[0] == 0 && (h != "" || opts[0] > 3) {
		return trace.SpanContext{} // version 0 has no more fields and no other flags
	}
	scc.TraceFlags = trace.TraceFlags(opts[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	if ts := carrier.Get(HeaderTracestate); ts != "" {
		scc.TraceState, _ = trace.ParseTraceState(ts) // a bad tracestate never fails the traceparent
	}
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// extractPart decodes the next "-"-separated field of *h, n lower-case hex digits, into
// dst and moves *h past it.
func extractPart(dst []byte, h *string, n int) bool {
	part, left, _ := strings.Cut(*h, "-")
	*h = left
	if len(part) != n {
		return false
	}
	var bad byte
	for i := 0; i < n; i += 2 {
		hi, lo := unhexLower[part[i]], unhexLower[part[i+1]]
		dst[i/2] = hi<<4 | lo
		bad |= hi | lo
	}
	return bad <= 0xf
}

// unhexLower is the value of each lower-case hex digit; 0xff for every other byte (the
// specification allows no upper case).
var unhexLower = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()
