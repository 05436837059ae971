package otel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/babelqueue-go/babelqueue"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
)

// Trace an app: a PRODUCER span per publish, a CONSUMER span per delivery handled, its
// child through the traceparent header.
func ExampleNewTracing() {
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter() // in production: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)

	tracing := bqotel.NewTracing(bqotel.WithTracerProvider(tp))
	app, err := babelqueue.Open(ctx, "memory://", babelqueue.WithQueue("orders"),
		babelqueue.WithObserver(tracing), // the settlement spans
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)
	tracing.Instrument(app) // the CONSUMER and PRODUCER spans

	runCtx, stop := context.WithCancel(ctx)
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		stop()
		return nil
	})
	if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": 1042}); err != nil {
		panic(err)
	}
	if err := app.Run(runCtx); err != nil {
		panic(err)
	}
	got := spans.GetSpans()
	for _, s := range got {
		fmt.Println(s.Name, s.SpanKind)
	}
	fmt.Println("child of the publish:", got[1].Parent.SpanID() == got[0].SpanContext.SpanID())
	// Output:
	// publish urn:babel:orders:created producer
	// process urn:babel:orders:created consumer
	// child of the publish: true
}

// Every SDK of the family maps an envelope's trace_id to the same trace, and derives the
// same parent for a consumer span when a message carries no traceparent.
func ExampleRemoteParent() {
	p := bqotel.RemoteParent("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
	fmt.Println(p.TraceID(), p.SpanID(), p.IsRemote())
	fmt.Println(bqotel.TraceIDOf("order-1042"))
	// Output:
	// 7b3f9c2ae41d4f889b2a1c0d5e6f7a8b 980c512d6f4a8fba true
	// bff83cdfb94d8087b6fd49cb20c427dc
}
