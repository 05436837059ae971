package artemis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// peer runs scripts/py/artemis_peer.py (the Python SDK 1.24.0 on its Artemis transport).
func peer(t *testing.T, stdin []byte, args ...string) [][]byte {
	t.Helper()
	out := pyinterop.Run(t, 2*time.Minute, stdin, pyinterop.Script(t, "artemis_peer.py"), args...)
	var lines [][]byte
	for _, l := range bytes.Split(out, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 && l[0] == '{' {
			lines = append(lines, l)
		}
	}
	return lines
}

// openApp opens the Go runtime on the test broker.
func openApp(t *testing.T, queue string, opts ...babelqueue.Option) *babelqueue.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := babelqueue.Open(ctx, brokerURL(t), append([]babelqueue.Option{babelqueue.WithQueue(queue), babelqueue.WithLogger(quiet())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// runApp runs a until stop is called.
func runApp(t *testing.T, a *babelqueue.App) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Go produces with the runtime; the Python SDK's worker handles every message with the
// data, meta.id and lang Go wrote.
func TestInteropPythonConsumesGo(t *testing.T) {
	pyinterop.Python(t)
	q := transporttest.UniqueName("bqtest-go2py")
	a := openApp(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := map[string]int{}
	for i := range 3 {
		id, err := a.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": 1000 + i, "note": "café ☕"},
			babelqueue.WithHeaders(map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = 1000 + i
	}
	lines := peer(t, nil, "consume", brokerURL(t), q, "--urn", "urn:babel:orders:created", "--max-messages", "3")
	if len(lines) != 3 {
		t.Fatalf("python handled %d messages, want 3: %s", len(lines), bytes.Join(lines, []byte("\n")))
	}
	for _, l := range lines {
		var got struct {
			URN  string `json:"urn"`
			Data struct {
				OrderID int    `json:"order_id"`
				Note    string `json:"note"`
			} `json:"data"`
			Meta struct {
				ID   string `json:"id"`
				Lang string `json:"lang"`
			} `json:"meta"`
		}
		if err := json.Unmarshal(l, &got); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		want, ok := ids[got.Meta.ID]
		if !ok || got.Data.OrderID != want || got.Data.Note != "café ☕" || got.Meta.Lang != "go" {
			t.Errorf("python handled %s; Go published ids %v", l, ids)
		}
		delete(ids, got.Meta.ID)
	}
}

// The Python SDK reads what a Go consumer rewound with its native attempts: the
// delivery-count Go's rewinds raised.
func TestInteropPythonSeesNativeAttempts(t *testing.T) {
	pyinterop.Python(t)
	tr := openTransport(t)
	q := transporttest.UniqueName("bqtest-go2py-count")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":7},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Headers: map[string]string{"x-tenant": "acme"}}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d := transporttest.Receive(t, c, 30*time.Second)
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lines := peer(t, nil, "drain", brokerURL(t), q)
	if len(lines) != 1 {
		t.Fatalf("python drained %d messages, want 1: %s", len(lines), bytes.Join(lines, []byte("\n")))
	}
	var got struct {
		Body           string            `json:"body"`
		NativeAttempts int               `json:"native_attempts"`
		Headers        map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(lines[0], &got); err != nil {
		t.Fatal(err)
	}
	// The Python SDK folds the delivery-count into the body it hands its worker
	// (attempts = max(body, delivery-count)): two Go rewinds and the link close that
	// gave the third delivery back leave a delivery-count of 2.
	want := bytes.Replace(body, []byte(`"attempts":0}`), []byte(`"attempts":2}`), 1)
	if got.Body != string(want) {
		t.Errorf("python read body %q, want %q", got.Body, want)
	}
	t.Logf("python sees: %s", lines[0])
}

// The Python SDK produces; the Go runtime handles each message with Python's data,
// trace_id and lang, and the body arrives byte for byte as Python wrote it.
func TestInteropGoConsumesPython(t *testing.T) {
	pyinterop.Python(t)
	q := transporttest.UniqueName("bqtest-py2go")
	var in bytes.Buffer
	for i := range 3 {
		fmt.Fprintf(&in, `{"urn":"urn:babel:orders:created","data":{"order_id":%d,"s":"naïve"},"trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"}`+"\n", 2000+i)
	}
	lines := peer(t, in.Bytes(), "publish", brokerURL(t), q)
	if len(lines) != 3 {
		t.Fatalf("python published %d, want 3", len(lines))
	}
	a := openApp(t, q)
	var mu sync.Mutex
	got := map[string]*babelqueue.Message{}
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		got[m.ID()] = m
		mu.Unlock()
		return nil
	})
	stop := runApp(t, a)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	for _, l := range lines {
		var p struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(l, &p)
		m, ok := got[p.ID]
		if !ok {
			t.Errorf("Go never handled python message %s", p.ID)
			continue
		}
		var data struct {
			OrderID int    `json:"order_id"`
			S       string `json:"s"`
		}
		if err := m.Bind(&data); err != nil || data.S != "naïve" || data.OrderID < 2000 {
			t.Errorf("data = %+v (%v)", data, err)
		}
		if m.TraceID() != "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b" || m.Envelope.Meta.Lang != "python" || m.Attempts != 0 {
			t.Errorf("trace %q lang %q attempts %d", m.TraceID(), m.Envelope.Meta.Lang, m.Attempts)
		}
	}
}

// What the Python SDK puts on the wire, as a raw AMQP consumer reads it: the binding's
// projection, and the section its body rides in. The Go consumer takes either section.
func TestInteropPythonWireShape(t *testing.T) {
	pyinterop.Python(t)
	q := transporttest.UniqueName("bqtest-pywire")
	peer(t, []byte(`{"urn":"urn:babel:orders:created","data":{"order_id":1},"trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"}`+"\n"), "publish", brokerURL(t), q)
	msg := rawReceive(t, q)
	section := "data"
	body := msg.GetData()
	if s, ok := msg.Value.(string); ok {
		section, body = "value(string)", []byte(s)
	}
	t.Logf("python 1.24.0 sends its body as an AMQP %s section; annotations %v; properties %+v; application properties %v",
		section, msg.Annotations, msg.Properties, msg.ApplicationProperties)
	if !bytes.HasPrefix(body, []byte(`{"job":"urn:babel:orders:created"`)) {
		t.Fatalf("python body = %q", body)
	}
	if msg.Annotations["x-opt-jms-type"] != "urn:babel:orders:created" || msg.Properties == nil || msg.Properties.CorrelationID != "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b" {
		t.Errorf("python projection differs from the manifest: %v %+v", msg.Annotations, msg.Properties)
	}
	for _, k := range []string{"bq_schema_version", "bq_source_lang", "bq_attempts", "bq_app_id"} {
		if _, ok := msg.ApplicationProperties[k].(string); !ok {
			t.Errorf("python %s = %#v, want a string", k, msg.ApplicationProperties[k])
		}
	}
}

// A Python worker fails a Go-produced message until max_attempts and dead-letters it;
// Go reads Python's retries and dead-letter over Artemis: the DLQ body keeps the Go
// envelope and carries Python's dead_letter block.
func TestInteropPythonDeadLettersGo(t *testing.T) {
	pyinterop.Python(t)
	q := transporttest.UniqueName("bqtest-py-dlq")
	a := openApp(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := a.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": 77})
	if err != nil {
		t.Fatal(err)
	}
	lines := peer(t, nil, "consume", brokerURL(t), q, "--fail", "urn:babel:orders:created", "--dead-letter", "--max-attempts", "2", "--max-messages", "2")
	if len(lines) != 2 {
		t.Fatalf("python handled %d times, want 2 (max_attempts 2): %s", len(lines), bytes.Join(lines, []byte("\n")))
	}
	tr := openTransport(t)
	c, err := tr.Consume(ctx, a.DeadLetterQueue(), transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	d := transporttest.Receive(t, c, 30*time.Second)
	var dl struct {
		Job  string `json:"job"`
		Meta struct {
			ID   string `json:"id"`
			Lang string `json:"lang"`
		} `json:"meta"`
		Attempts   int `json:"attempts"`
		DeadLetter struct {
			Reason        string `json:"reason"`
			Lang          string `json:"lang"`
			OriginalQueue string `json:"original_queue"`
			Error         string `json:"error"`
		} `json:"dead_letter"`
	}
	if err := json.Unmarshal(d.Body, &dl); err != nil {
		t.Fatalf("DLQ body %q: %v", d.Body, err)
	}
	if dl.Job != "urn:babel:orders:created" || dl.Meta.ID != id || dl.Meta.Lang != "go" {
		t.Errorf("the dead-lettered envelope is not Go's: %s", d.Body)
	}
	if dl.DeadLetter.Reason != "failed" || dl.DeadLetter.Lang != "python" || dl.DeadLetter.OriginalQueue != q || !strings.Contains(dl.DeadLetter.Error, "python says no") {
		t.Errorf("dead_letter block = %+v", dl.DeadLetter)
	}
	t.Logf("python dead-lettered a Go message on Artemis: %s (bq_attempts header %d present %v, delivery-count %d)", d.Body, d.AttemptsHeader, d.HasAttemptsHeader, d.Redeliveries)
	_ = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
}

// The Go runtime fails a Python-produced message until max_attempts and dead-letters
// it; the Python SDK reads the dead-letter queue.
func TestInteropGoDeadLettersPython(t *testing.T) {
	pyinterop.Python(t)
	q := transporttest.UniqueName("bqtest-go-dlq")
	lines := peer(t, []byte(`{"urn":"urn:babel:orders:created","data":{"order_id":88}}`+"\n"), "publish", brokerURL(t), q)
	if len(lines) != 1 {
		t.Fatalf("python published %d", len(lines))
	}
	var pub struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(lines[0], &pub)
	a := openApp(t, q, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(2))
	var mu sync.Mutex
	var seen []int
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		seen = append(seen, m.Attempts)
		mu.Unlock()
		return fmt.Errorf("go says no")
	})
	stop := runApp(t, a)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let the dead-letter write settle
	stop()
	mu.Lock()
	if len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
		t.Errorf("Go handler saw attempts %v, want [0 1]", seen)
	}
	mu.Unlock()
	out := peer(t, nil, "drain", brokerURL(t), a.DeadLetterQueue())
	if len(out) != 1 {
		t.Fatalf("python drained %d messages from the DLQ, want 1: %s", len(out), bytes.Join(out, []byte("\n")))
	}
	var got struct {
		Body string `json:"body"`
	}
	_ = json.Unmarshal(out[0], &got)
	var env struct {
		Meta struct {
			ID   string `json:"id"`
			Lang string `json:"lang"`
		} `json:"meta"`
		DeadLetter struct {
			Reason string `json:"reason"`
			Lang   string `json:"lang"`
			Error  string `json:"error"`
		} `json:"dead_letter"`
	}
	if err := json.Unmarshal([]byte(got.Body), &env); err != nil {
		t.Fatalf("python read DLQ body %q: %v", got.Body, err)
	}
	if env.Meta.ID != pub.ID || env.Meta.Lang != "python" || env.DeadLetter.Reason != "failed" || env.DeadLetter.Lang != "go" || env.DeadLetter.Error != "go says no" {
		t.Errorf("python read the Go dead-letter as %s", got.Body)
	}
}
