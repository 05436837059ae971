package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const (
	interopURN  = "urn:babel:interop:sqs"
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

func pyLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("python printed %q: %v", line, err)
		}
		rows = append(rows, m)
	}
	return rows
}

// interopQueue makes a queue through the Go transport (the Python SDK does not create
// queues) and returns its name.
func interopQueue(t *testing.T, tr *Transport) string {
	t.Helper()
	q := transporttest.UniqueName("bqinterop")
	queueURL(t, tr, q)
	deleteQueueLater(t, tr, q)
	return q
}

// TestInteropPythonToGo: envelopes the Python SDK produces reach a Go handler with their
// data, lang, attempts 0 and the traceparent header; the Go transport reads Python's
// bq-schema-version attribute as "1".
func TestInteropPythonToGo(t *testing.T) {
	pyinterop.Python(t)
	url := testURL(t)
	tr := openTest(t)
	q := interopQueue(t, tr)
	const n = 4
	rows := pyLines(t, pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "sqs_peer.py"), "produce", url, q, "4"))
	if len(rows) != n {
		t.Fatalf("python produced %d messages, want %d", len(rows), n)
	}
	// Transport level, on a second batch: the wire facts.
	q2 := interopQueue(t, tr)
	pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "sqs_peer.py"), "produce", url, q2, "2")
	c := consumeT(t, tr, q2, 2)
	for range 2 {
		d := transporttest.Receive(t, c, 20*time.Second)
		if d.SchemaVersion != "1" {
			t.Errorf("bq-schema-version from Python = %#v, want \"1\"", d.SchemaVersion)
		}
		if d.Redeliveries != 0 || d.HasAttemptsHeader || d.Key != nil {
			t.Errorf("first delivery: Redeliveries %d, attempts header %v, key %q", d.Redeliveries, d.HasAttemptsHeader, d.Key)
		}
		for k := range d.Headers {
			if k != "traceparent" {
				t.Errorf("unexpected header %q from Python", k)
			}
		}
		ack(t, c, d)
	}
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithShutdownGrace(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*babelqueue.Message
	all := make(chan struct{})
	a.Handle(interopURN, func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m)
		if len(seen) == n {
			close(all)
		}
		return nil
	})
	stop := runApp(t, a)
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("the Go runtime did not handle every Python message")
	}
	stop()
	withHeader := 0
	for _, m := range seen {
		if m.Envelope.Meta.Lang != "python" {
			t.Errorf("lang = %q, want python", m.Envelope.Meta.Lang)
		}
		if m.Attempts != 0 {
			t.Errorf("attempts on a first delivery = %d, want 0", m.Attempts)
		}
		var data struct {
			N    int    `json:"n"`
			From string `json:"from"`
		}
		if err := json.Unmarshal(m.Envelope.Data, &data); err != nil || data.From != "python" {
			t.Errorf("data = %s (%v)", m.Envelope.Data, err)
		}
		if m.Header("traceparent") == traceparent {
			withHeader++
		}
	}
	if withHeader != n/2 {
		t.Errorf("%d messages carried the traceparent, want %d", withHeader, n/2)
	}
}

// TestInteropGoToPython: envelopes the Go runtime publishes are handled by the Python
// SDK (attempts 0, lang go), and the bare Python transport sees the Go headers.
func TestInteropGoToPython(t *testing.T) {
	pyinterop.Python(t)
	url := testURL(t)
	tr := openTest(t)
	q := interopQueue(t, tr)
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	for i := range 3 {
		if _, err := a.Publish(ctx, interopURN, map[string]any{"n": i, "from": "go"}); err != nil {
			t.Fatal(err)
		}
	}
	rows := pyLines(t, pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "sqs_peer.py"), "handle", url, q, "3"))
	if len(rows) != 3 {
		t.Fatalf("python handled %d messages, want 3", len(rows))
	}
	for _, r := range rows {
		data, _ := r["data"].(map[string]any)
		if data["from"] != "go" || r["lang"] != "go" || r["attempts"] != float64(0) {
			t.Errorf("python saw %v", r)
		}
	}
	// Out-of-band headers ride as attributes the Python transport maps back.
	if _, err := a.Publish(ctx, interopURN, map[string]any{"n": 9}, babelqueue.WithHeaders(map[string]string{"traceparent": traceparent})); err != nil {
		t.Fatal(err)
	}
	rows = pyLines(t, pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "sqs_peer.py"), "consume", url, q, "1"))
	if len(rows) != 1 {
		t.Fatalf("python popped %d messages", len(rows))
	}
	headers, _ := rows[0]["headers"].(map[string]any)
	if headers["traceparent"] != traceparent {
		t.Errorf("python saw headers %v, want the traceparent", headers)
	}
	// Python 1.24.0 surfaces every attribute, the bq- projection included, in its
	// headers (the Go transport keeps the projection out of Delivery.Headers): so
	// Python reads the projection the Go transport wrote.
	if headers["bq-job"] != interopURN || headers["bq-source-lang"] != "go" || headers["bq-schema-version"] != "1" {
		t.Errorf("python read the projection as %v", headers)
	}
}

// TestInteropPythonRetryCountsInGo: a Python handler failure releases the message with
// ChangeMessageVisibility (no re-send); the Go runtime then sees attempts 1 from
// ApproximateReceiveCount.
func TestInteropPythonRetryCountsInGo(t *testing.T) {
	pyinterop.Python(t)
	url := testURL(t)
	tr := openTest(t)
	q := interopQueue(t, tr)
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithShutdownGrace(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(ctxT(t, 30*time.Second), interopURN, map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "sqs_peer.py"), "fail-once", url, q)
	got := make(chan int, 1)
	a.Handle(interopURN, func(_ context.Context, m *babelqueue.Message) error {
		select {
		case got <- m.Attempts:
		default:
		}
		return nil
	})
	stop := runApp(t, a)
	select {
	case n := <-got:
		if n != 1 {
			t.Errorf("after one Python failure Go sees attempts %d, want 1", n)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the message never came back to Go")
	}
	stop()
}
