package otel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const interopURN = "urn:babel:interop:otel"

// pySpan is a line of scripts/py/otel_peer.py.
type pySpan struct {
	ID           string `json:"id"`
	TraceID      string `json:"trace_id"`
	Traced       bool   `json:"traced"`
	Trace        string `json:"trace"`
	Span         string `json:"span"`
	Parent       string `json:"parent"`
	ParentRemote bool   `json:"parent_remote"`
	ParentTrace  string `json:"parent_trace"`
}

func pyLines(t *testing.T, out []byte) []pySpan {
	t.Helper()
	var rows []pySpan
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var s pySpan
		if err := json.Unmarshal(line, &s); err != nil {
			t.Fatalf("python printed %q: %v", line, err)
		}
		rows = append(rows, s)
	}
	return rows
}

// runPy runs the peer with extra environment variables.
func runPy(t *testing.T, env []string, args ...string) []pySpan {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pyinterop.Python(t), append([]string{pyinterop.Script(t, "otel_peer.py")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("otel_peer.py %v: %v\n%s", args, err, errb.String())
	}
	return pyLines(t, out.Bytes())
}

// tracedApp opens a traced app on the test Redis.
func tracedApp(t *testing.T, url, queue string, traced bool) (*babelqueue.App, *tracetest.InMemoryExporter, *transporttest.Recorder) {
	t.Helper()
	exp, rec := tracetest.NewInMemoryExporter(), transporttest.NewRecorder()
	tr := bqotel.NewTracing(bqotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := babelqueue.Open(ctx, url, babelqueue.WithQueue(queue), babelqueue.WithObserver(tr, rec),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	if traced {
		tr.Instrument(app)
	}
	return app, exp, rec
}

// Python → Go on Redis: the Go CONSUMER span of a message published through Python's
// otel.publish is the child of Python's PRODUCER span; a plain Python publish puts it
// under the parent both SDKs derive from trace_id.
func TestInteropPythonProducerGoConsumer(t *testing.T) {
	url := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	queue := fmt.Sprintf("otel-py2go-%d", time.Now().UnixNano())
	produced := runPy(t, []string{"TRACE=order-1042"}, "produce", url, queue)
	if len(produced) != 2 || !produced[0].Traced || produced[1].Traced {
		t.Fatalf("python produced %+v", produced)
	}
	derived := runPy(t, nil, "ids", "order-1042")[0]

	app, exp, rec := tracedApp(t, url, queue, true)
	app.Handle(interopURN, func(context.Context, *babelqueue.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	rec.WaitSettled(t, 2, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		got[attr(s, "messaging.message.id")] = s
	}
	traced, plain := got[produced[0].ID], got[produced[1].ID]
	if traced.SpanContext.TraceID().String() != produced[0].Trace || traced.Parent.SpanID().String() != produced[0].Span {
		t.Errorf("Go span of the traced message: trace %s parent %s; python PRODUCER span: trace %s span %s",
			traced.SpanContext.TraceID(), traced.Parent.SpanID(), produced[0].Trace, produced[0].Span)
	}
	if plain.SpanContext.TraceID().String() != derived.Trace || plain.Parent.SpanID().String() != derived.Parent || !plain.Parent.IsRemote() {
		t.Errorf("Go span of the plain message: trace %s parent %s; python derives trace %s parent %s",
			plain.SpanContext.TraceID(), plain.Parent.SpanID(), derived.Trace, derived.Parent)
	}
	if p := bqotel.RemoteParent("order-1042"); p.TraceID().String() != derived.Trace || p.SpanID().String() != derived.Parent {
		t.Errorf("Go derives %s/%s from order-1042, Python %s/%s", p.TraceID(), p.SpanID(), derived.Trace, derived.Parent)
	}
}

// Go → Python on Redis: Python's CONSUMER span of a message the Go app published with
// tracing is the child of the Go PRODUCER span; a message published without tracing
// lands under the parent both SDKs derive from its trace_id.
func TestInteropGoProducerPythonConsumer(t *testing.T) {
	url := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	queue := fmt.Sprintf("otel-go2py-%d", time.Now().UnixNano())
	ctx := context.Background()
	app, exp, _ := tracedApp(t, url, queue, true)
	tracedID, err := app.Publish(ctx, interopURN, map[string]any{"n": 0, "from": "go"})
	if err != nil {
		t.Fatal(err)
	}
	plainApp, _, _ := tracedApp(t, url, queue, false)
	plainID, err := plainApp.Publish(ctx, interopURN, map[string]any{"n": 1, "from": "go"}, babelqueue.ContinueTrace("order-1042"))
	if err != nil {
		t.Fatal(err)
	}
	pub := exp.GetSpans()
	if len(pub) != 1 {
		t.Fatalf("%d Go spans, want the one PRODUCER span", len(pub))
	}
	consumed := map[string]pySpan{}
	for _, s := range runPy(t, nil, "consume", url, queue, "2") {
		consumed[s.ID] = s
	}
	traced, plain := consumed[tracedID], consumed[plainID]
	if traced.Parent != pub[0].SpanContext.SpanID().String() || traced.Trace != pub[0].SpanContext.TraceID().String() || !traced.ParentRemote {
		t.Errorf("python span of the traced message: trace %s parent %s; Go PRODUCER span: trace %s span %s",
			traced.Trace, traced.Parent, pub[0].SpanContext.TraceID(), pub[0].SpanContext.SpanID())
	}
	// Published outside any span, the Go PRODUCER span is in the trace of its trace_id.
	if want := bqotel.TraceIDOf(traced.TraceID).String(); traced.Trace != want {
		t.Errorf("python span in trace %s; the message's trace_id %s maps to %s", traced.Trace, traced.TraceID, want)
	}
	want := bqotel.RemoteParent("order-1042")
	if plain.Trace != want.TraceID().String() || plain.Parent != want.SpanID().String() {
		t.Errorf("python span of the plain message: trace %s parent %s; Go derives trace %s parent %s",
			plain.Trace, plain.Parent, want.TraceID(), want.SpanID())
	}
}
