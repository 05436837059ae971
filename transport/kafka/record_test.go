package kafka

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

func testTransport(t *testing.T) *Transport {
	t.Helper()
	tr, err := newTransport(nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func headerMap(t *testing.T, r *kgo.Record) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, h := range r.Headers {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %s written twice", h.Key)
		}
		if h.Value == nil {
			t.Errorf("header %s has a null value", h.Key)
		}
		if cap(h.Value) != len(h.Value) {
			t.Errorf("header %s: cap %d > len %d, an append could overwrite its neighbour", h.Key, cap(h.Value), len(h.Value))
		}
		got[h.Key] = string(h.Value)
	}
	return got
}

// The record carries the projection, the delay headers and the out-of-band headers, in
// order, and owns all its bytes.
func TestRecordProjectionAndOwnership(t *testing.T) {
	tr := testTransport(t)
	body := []byte(`{"job":"urn:babel:orders:created"}`)
	key := []byte("order-1042")
	m := &transport.Message{
		Queue: "orders", Body: body, Key: key, Attempts: 3, Delay: 1500 * time.Millisecond,
		Headers: map[string]string{"tenant": "acme", "empty": "", "bq-job": "spoofed", "a": "first"},
		Projection: transport.Projection{URN: "urn:babel:orders:created", TraceID: "trace-1", MessageID: "msg-1",
			Lang: "go", SchemaVersion: 2, CreatedAt: 1749132727000},
	}
	now := time.UnixMilli(1_000_000)
	r, err := tr.record(m, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "orders.delay.1500" {
		t.Errorf("topic %q", r.Topic)
	}
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	wantKeys := []string{HeaderJob, HeaderTraceID, HeaderMessageID, HeaderSchemaVersion, HeaderSourceLang,
		HeaderAttempts, HeaderDueAt, HeaderOriginalTopic, "a", "empty", "tenant"}
	if len(keys) != len(wantKeys) {
		t.Fatalf("header keys %q, want %q", keys, wantKeys)
	}
	for i := range keys {
		if keys[i] != wantKeys[i] {
			t.Fatalf("header keys %q, want %q", keys, wantKeys)
		}
	}
	want := map[string]string{
		HeaderJob: "urn:babel:orders:created", HeaderTraceID: "trace-1", HeaderMessageID: "msg-1",
		HeaderSchemaVersion: "2", HeaderSourceLang: "go", HeaderAttempts: "3",
		HeaderDueAt: strconv.FormatInt(now.Add(1500*time.Millisecond).UnixMilli(), 10), HeaderOriginalTopic: "orders",
		"a": "first", "empty": "", "tenant": "acme",
	}
	got := headerMap(t, r)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
	if !r.Timestamp.Equal(time.UnixMilli(1749132727000)) {
		t.Errorf("timestamp %v", r.Timestamp)
	}

	// The caller's buffers are free to reuse.
	copy(body, bytes.Repeat([]byte("x"), len(body)))
	copy(key, "XXXXXXXXXX")
	if string(r.Value) != `{"job":"urn:babel:orders:created"}` || string(r.Key) != "order-1042" {
		t.Errorf("record shares the caller's buffers: value %q key %q", r.Value, r.Key)
	}
	if cap(r.Value) != len(r.Value) || cap(r.Key) != len(r.Key) {
		t.Error("value or key can be appended into its neighbour")
	}
}

// A nil or empty body is an empty value, never a null (tombstone) one; a nil key is a
// null key and an empty key an empty one.
func TestRecordNullability(t *testing.T) {
	tr := testTransport(t)
	for _, c := range []struct {
		name      string
		body, key []byte
		wantKey   []byte
	}{
		{"nil body, nil key", nil, nil, nil},
		{"empty body, empty key", []byte{}, []byte{}, []byte{}},
		{"body and key", []byte("{}"), []byte("k"), []byte("k")},
	} {
		r, err := tr.record(&transport.Message{Queue: "q", Body: c.body, Key: c.key}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Value == nil || !bytes.Equal(r.Value, c.body) {
			t.Errorf("%s: value %#v", c.name, r.Value)
		}
		if (r.Key == nil) != (c.wantKey == nil) || !bytes.Equal(r.Key, c.wantKey) {
			t.Errorf("%s: key %#v, want %#v", c.name, r.Key, c.wantKey)
		}
		if got := headerMap(t, r); len(got) != 1 || got[HeaderAttempts] != "0" {
			t.Errorf("%s: headers %v, want only bq-attempts 0", c.name, got)
		}
		if !r.Timestamp.IsZero() {
			t.Errorf("%s: timestamp set without created_at", c.name)
		}
	}
}

// Many out-of-band headers go past the room kept beside the record.
func TestRecordManyHeaders(t *testing.T) {
	tr := testTransport(t)
	hs := map[string]string{}
	for i := range 20 {
		hs["h"+strconv.Itoa(100+i)] = strconv.Itoa(i)
	}
	r, err := tr.record(&transport.Message{Queue: "q", Headers: hs, Projection: transport.Projection{URN: "u", Lang: "go"}}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got := headerMap(t, r)
	if len(got) != 23 {
		t.Fatalf("%d headers, want 23", len(got))
	}
	for i := range 20 {
		if got["h"+strconv.Itoa(100+i)] != strconv.Itoa(i) {
			t.Errorf("h%d = %q", 100+i, got["h"+strconv.Itoa(100+i)])
		}
	}
}

// BenchmarkRecord: the projection Publish makes per message, without a broker.
func BenchmarkRecord(b *testing.B) {
	tr, err := newTransport(nil, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	m := &transport.Message{Queue: "orders", Body: make([]byte, 330), Projection: transport.Projection{
		URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.record(m, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}
