package kafka

import (
	"bytes"
	"context"
	"fmt"
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
	r, err := tr.record(context.Background(), m, now)
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
// null key and an empty key an empty one; handed over (Owned) or not.
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
		for _, owned := range []bool{false, true} {
			r, err := tr.record(context.Background(), &transport.Message{Queue: "q", Body: c.body, Key: c.key, Owned: owned}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			checkNullability(t, fmt.Sprintf("%s (owned %v)", c.name, owned), r, c.body, c.wantKey)
		}
	}
}

// checkNullability checks r, the record of a message of body and key with no
// projection (name says which).
func checkNullability(t *testing.T, name string, r *kgo.Record, body, wantKey []byte) {
	t.Helper()
	if r.Value == nil || !bytes.Equal(r.Value, body) {
		t.Errorf("%s: value %#v", name, r.Value)
	}
	if (r.Key == nil) != (wantKey == nil) || !bytes.Equal(r.Key, wantKey) {
		t.Errorf("%s: key %#v, want %#v", name, r.Key, wantKey)
	}
	if got := headerMap(t, r); len(got) != 1 || got[HeaderAttempts] != "0" {
		t.Errorf("%s: headers %v, want only bq-attempts 0", name, got)
	}
	if !r.Timestamp.IsZero() {
		t.Errorf("%s: timestamp set without created_at", name)
	}
}

// A message handed over (Owned, as the runtime's publishes are) keeps its body and key:
// the record's value is the body itself, not a copy, and the headers are projected as
// for any message.
func TestRecordKeepsAnOwnedBody(t *testing.T) {
	tr := testTransport(t)
	body := make([]byte, 64<<10, 65<<10)
	copy(body, `{"job":"urn:babel:orders:created"}`)
	key := []byte("order-1042")
	m := &transport.Message{Queue: "orders", Body: body, Key: key, Owned: true,
		Projection: transport.Projection{URN: "urn:babel:orders:created", TraceID: "trace-1", MessageID: "msg-1", Lang: "go", SchemaVersion: 1}}
	r, err := tr.record(context.Background(), m, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if &r.Value[0] != &body[0] || len(r.Value) != len(body) || &r.Key[0] != &key[0] {
		t.Error("the record copied a body handed over to it")
	}
	if cap(r.Value) != len(r.Value) || cap(r.Key) != len(r.Key) {
		t.Error("an append to the value or key could write into the caller's spare capacity")
	}
	if got := headerMap(t, r); got[HeaderJob] != "urn:babel:orders:created" || got[HeaderMessageID] != "msg-1" || len(got) != 6 {
		t.Errorf("headers %v", got)
	}
}

// Many out-of-band headers go past the room kept beside the record.
func TestRecordManyHeaders(t *testing.T) {
	tr := testTransport(t)
	hs := map[string]string{}
	for i := range 20 {
		hs["h"+strconv.Itoa(100+i)] = strconv.Itoa(i)
	}
	r, err := tr.record(context.Background(), &transport.Message{Queue: "q", Headers: hs, Projection: transport.Projection{URN: "u", Lang: "go"}}, time.Time{})
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
		if _, err := tr.record(context.Background(), m, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}
