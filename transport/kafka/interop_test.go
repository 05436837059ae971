package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

type deadLetterBody struct {
	Job        string                `json:"job"`
	Data       json.RawMessage       `json:"data"`
	Meta       struct{ Lang string } `json:"meta"`
	DeadLetter *struct {
		Reason        string `json:"reason"`
		OriginalQueue string `json:"original_queue"`
		Attempts      int    `json:"attempts"`
		Lang          string `json:"lang"`
		Error         string `json:"error"`
	} `json:"dead_letter"`
}

// runApp runs a runtime App on tr until the test ends.
func runApp(t *testing.T, a *babelqueue.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("App.Run did not return")
		}
	})
}

// TestPythonToGo: the Python SDK 1.24.0 publishes on Kafka; the Go runtime consumes,
// handles one message and dead-letters the other (handler failure, one attempt); the
// Python SDK reads the Go dead letter: a null key stays null, the envelope is kept and
// the dead_letter block says failed/go.
func TestPythonToGo(t *testing.T) {
	raw := brokerURL(t)
	script := pyinterop.Script(t, "kafka_peer.py")
	q := newTopic(t, "bqtest-py2go")
	in := `{"urn":"urn:babel:orders:created","data":{"order_id":1042,"note":"café ☕"},"headers":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
{"urn":"urn:babel:orders:refused","data":{"order_id":7}}
`
	out := pyinterop.Run(t, 2*time.Minute, []byte(in), script, "publish", raw, q)
	if n := strings.Count(string(out), `"id"`); n != 2 {
		t.Fatalf("python published %d messages: %s", n, out)
	}

	tr := openKafka(t)
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		got  []*babelqueue.Message
		done = make(chan struct{}, 2)
	)
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	a.Handle("urn:babel:orders:refused", func(context.Context, *babelqueue.Message) error {
		done <- struct{}{}
		return errors.New("go says no")
	})
	runApp(t, a)
	for range 2 {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the Go runtime did not handle the Python messages")
		}
	}
	mu.Lock()
	m := got[0]
	mu.Unlock()
	var data struct {
		OrderID int    `json:"order_id"`
		Note    string `json:"note"`
	}
	if err := m.Bind(&data); err != nil || data.OrderID != 1042 || data.Note != "café ☕" {
		t.Errorf("data from python = %+v (%v)", data, err)
	}
	if m.Envelope.Meta.Lang != "python" || m.Attempts != 0 {
		t.Errorf("lang %q attempts %d, want python 0", m.Envelope.Meta.Lang, m.Attempts)
	}
	if m.Key() != nil {
		t.Errorf("python published without a key, Go sees key %q", m.Key())
	}
	// Observed with babelqueue 1.24.0: its KafkaTransport is not a header publisher, so
	// publish_with_headers drops the out-of-band headers (the SDK documents the fallback);
	// only the binding's own bq- headers ride, and those never reach Message.Headers.
	if len(m.Headers()) != 0 {
		t.Errorf("headers from a Python publish = %v, want none (Python 1.24.0 drops them on Kafka)", m.Headers())
	}

	// Python reads the Go dead letter.
	out = pyinterop.Run(t, 2*time.Minute, nil, script, "drain", raw, q+".dlq", transporttest.UniqueName("bqtest-py"), "1")
	var rec struct {
		Body string  `json:"body"`
		Key  *string `json:"key"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &rec); err != nil {
		t.Fatalf("python drain output %q: %v", out, err)
	}
	if rec.Key != nil {
		t.Errorf("dead letter of a keyless record has key %q on the Python side", *rec.Key)
	}
	var dl deadLetterBody
	if err := json.Unmarshal([]byte(rec.Body), &dl); err != nil {
		t.Fatalf("dead letter body %q: %v", rec.Body, err)
	}
	if dl.Job != "urn:babel:orders:refused" || dl.DeadLetter == nil || dl.DeadLetter.Reason != "failed" || dl.DeadLetter.Lang != "go" || dl.DeadLetter.OriginalQueue != q || dl.Meta.Lang != "python" {
		t.Errorf("dead letter as Python reads it: %s", rec.Body)
	}
}

// TestGoToPython: the Go runtime publishes with a key, an empty key and no key; the Python
// SDK's worker handles one URN and dead-letters the other; Go reads the Python dead letters
// and finds every key exactly as published.
func TestGoToPython(t *testing.T) {
	raw := brokerURL(t)
	script := pyinterop.Script(t, "kafka_peer.py")
	q := newTopic(t, "bqtest-go2py")
	tr := openKafka(t)
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := map[int][]byte{1: []byte("order-1"), 2: {}, 3: nil}
	for i := 1; i <= 3; i++ {
		if _, err := a.Publish(ctx, "urn:babel:orders:refused", map[string]any{"n": i}, babelqueue.WithKey(keys[i])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Publish(ctx, "urn:babel:orders:created", map[string]any{"n": 0, "s": "naïve"}, babelqueue.WithHeaders(map[string]string{"x-tenant": "acme"})); err != nil {
		t.Fatal(err)
	}
	if err := tr.Producer().Flush(ctx); err != nil {
		t.Fatal(err)
	}

	out := pyinterop.Run(t, 2*time.Minute, nil, script, "work", raw, q, transporttest.UniqueName("bqtest-py"), "4",
		"--urn", "urn:babel:orders:created", "--fail", "urn:babel:orders:refused", "--dead-letter", "--max-attempts", "1")
	var handled int
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var seen struct {
			URN     string            `json:"urn"`
			Data    map[string]any    `json:"data"`
			Meta    map[string]any    `json:"meta"`
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(line, &seen); err != nil {
			t.Fatalf("python output %q: %v", line, err)
		}
		handled++
		if seen.Meta["lang"] != "go" || seen.Meta["queue"] != q {
			t.Errorf("python saw meta %v", seen.Meta)
		}
		if seen.URN == "urn:babel:orders:created" {
			if seen.Data["s"] != "naïve" {
				t.Errorf("python saw data %v", seen.Data)
			}
			t.Logf("out-of-band headers as the Python handler sees them: %v", seen.Headers)
		}
	}
	if handled != 4 {
		t.Fatalf("python handled %d messages, want 4:\n%s", handled, out)
	}

	// The Python dead letters, read on the wire: keys exact, envelope kept, block filled.
	for _, r := range readTopic(t, q+".dlq", 3) {
		var dl deadLetterBody
		if err := json.Unmarshal(r.Value, &dl); err != nil {
			t.Fatalf("python dead letter %q: %v", r.Value, err)
		}
		var d struct{ N int }
		_ = json.Unmarshal(dl.Data, &d)
		want := keys[d.N]
		if (r.Key == nil) != (want == nil) || !bytes.Equal(r.Key, want) {
			t.Errorf("n=%d: python dead letter key = %#v, want %#v", d.N, r.Key, want)
		}
		if dl.DeadLetter == nil || dl.DeadLetter.Reason != "failed" || dl.DeadLetter.Lang != "python" || dl.DeadLetter.OriginalQueue != q || dl.Meta.Lang != "go" {
			t.Errorf("python dead letter: %s", r.Value)
		}
	}
	// And the Go transport consumes them with the same keys.
	c := consumeOn(t, tr, q+".dlq", 4)
	for range 3 {
		d := transporttest.Receive(t, c, 30*time.Second)
		var dl deadLetterBody
		_ = json.Unmarshal(d.Body, &dl)
		var n struct{ N int }
		_ = json.Unmarshal(dl.Data, &n)
		want := keys[n.N]
		if (d.Key == nil) != (want == nil) || !bytes.Equal(d.Key, want) {
			t.Errorf("n=%d: Delivery.Key = %#v, want %#v", n.N, d.Key, want)
		}
		if !d.HasAttemptsHeader {
			t.Errorf("n=%d: python dead letter without a readable bq-attempts header", n.N)
		}
		t.Logf("python dead letter n=%d bq-attempts=%s", n.N, strconv.Itoa(d.AttemptsHeader))
		settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
}
