package otel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	bqotel "github.com/babelqueue-go/babelqueue/otel"
)

// traceparents are valid and invalid traceparent values, each with and without a
// tracestate, for the reader to be compared with the propagator.
var traceparents = []string{
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-04",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
	"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09-extra",
	"cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	"fe-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff",
	"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
	"00-00000000000000000000000000000000-b7ad6b7169203331-01",
	"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
	"00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
	"0-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	"00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
	"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",
	"",
	"-",
	"garbage",
}

// extractReference is what the propagator makes of carrier: the span context of the
// context it returns.
func extractReference(carrier propagation.MapCarrier) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

func TestExtractW3CAsPropagator(t *testing.T) {
	for _, tp := range traceparents {
		for _, ts := range []string{"", "vendor=abc,other=x-1", "bad state!"} {
			carrier := propagation.MapCarrier{}
			if tp != "" {
				carrier[bqotel.HeaderTraceparent] = tp
			}
			if ts != "" {
				carrier[bqotel.HeaderTracestate] = ts
			}
			if got, want := bqotel.ExtractW3C(carrier), extractReference(carrier); !got.Equal(want) || got.IsRemote() != want.IsRemote() {
				t.Errorf("%q, %q: read %v, the propagator %v", tp, ts, got, want)
			}
		}
	}
}

func FuzzExtractW3C(f *testing.F) {
	for _, tp := range traceparents {
		f.Add(tp, "")
	}
	f.Add(traceparents[0], "a=b")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		carrier := propagation.MapCarrier{bqotel.HeaderTraceparent: tp, bqotel.HeaderTracestate: ts}
		if got, want := bqotel.ExtractW3C(carrier), extractReference(carrier); !got.Equal(want) || got.IsRemote() != want.IsRemote() {
			t.Errorf("%q, %q: read %v, the propagator %v", tp, ts, got, want)
		}
	})
}

// The one-allocation parent context is the API's: the span found in it, the span
// context, the values of the context below it, and the parent of a span started in it.
func TestWithRemoteParentAsAPI(t *testing.T) {
	if !bqotel.SpanKeyLearnt() {
		t.Fatal("the tracing API's span key was not learnt: every parent takes the API's two allocations")
	}
	type key struct{}
	base, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	sc := bqotel.RemoteParent("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
	got, want := bqotel.WithRemoteParent(base, sc), trace.ContextWithRemoteSpanContext(base, sc)
	gs, ws := trace.SpanFromContext(got), trace.SpanFromContext(want)
	if !gs.SpanContext().Equal(ws.SpanContext()) || !gs.SpanContext().IsRemote() || gs.IsRecording() || gs.TracerProvider() == nil {
		t.Errorf("span %v (recording %v), the API's %v", gs.SpanContext(), gs.IsRecording(), ws.SpanContext())
	}
	if got.Value(key{}) != "v" {
		t.Error("the context below is not asked")
	}
	cancel()
	if got.Err() == nil {
		t.Error("cancelling the context below does not reach it")
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())), sdktrace.WithSpanProcessor(rec))
	_, span := tp.Tracer("t").Start(bqotel.WithRemoteParent(context.Background(), sc), "child")
	span.End()
	if ended := rec.Ended(); len(ended) != 1 || !ended[0].Parent().Equal(sc) || ended[0].SpanContext().TraceID() != sc.TraceID() {
		t.Fatalf("the child of a sampled remote parent: %v", ended)
	}
}
