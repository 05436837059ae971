package envelope

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestMakeMintsDistinctV4IDs: a new envelope's trace_id and meta.id are version 4 UUIDs,
// never equal, never repeated across envelopes.
func TestMakeMintsDistinctV4IDs(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		e, err := Make("urn:babel:orders:created", map[string]int{"n": 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{e.TraceID, e.Meta.ID} {
			if !uuidV4.MatchString(id) {
				t.Fatalf("minted id %q is not a version 4 UUID", id)
			}
			if seen[id] {
				t.Fatalf("minted id %q twice", id)
			}
			seen[id] = true
		}
	}
	if id := NewUUID(); !uuidV4.MatchString(id) || seen[id] {
		t.Fatalf("NewUUID = %q", id)
	}
}

// TestEncodeAllocatesOnce: Encode writes the body into one buffer of its size, whatever
// the size of the data and of the dead-letter block (it used to outgrow its first
// buffer and copy the body into one twice as large).
func TestEncodeAllocatesOnce(t *testing.T) {
	long := strings.Repeat("x", 300)
	big := json.RawMessage(`{"text":"` + strings.Repeat("lorem ipsum ", 6000) + `"}`)
	at := time.UnixMilli(1749132727000)
	for name, e := range map[string]*Envelope{
		"small":       mustMake(t, json.RawMessage(`{"n":1}`), WithQueue("orders"), WithCreatedAt(at)),
		"64 KiB":      mustMake(t, big, WithQueue(long), WithCreatedAt(at)),
		"dead letter": withDeadLetter(mustMake(t, json.RawMessage(`{"n":1}`), WithQueue(long), WithCreatedAt(at)), long),
	} {
		var body []byte
		allocs := testing.AllocsPerRun(20, func() {
			var err error
			if body, err = e.Encode(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 1 {
			t.Errorf("%s: Encode made %v allocations, want 1", name, allocs)
		}
		if !json.Valid(body) {
			t.Errorf("%s: Encode wrote invalid JSON", name)
		}
	}
}

func mustMake(t *testing.T, data any, opts ...Option) *Envelope {
	t.Helper()
	e, err := Make("urn:babel:orders:created", data, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func withDeadLetter(e *Envelope, text string) *Envelope {
	e.DeadLetter = &DeadLetter{Reason: ReasonFailed, Error: &text, Exception: &text, FailedAt: 1749132727000,
		OriginalQueue: text, Attempts: 3, Lang: "go"}
	return e
}

// TestMakeKeepsCompactDataAndCompactsSpacedData: raw data is stored compact, its bytes
// otherwise unchanged (white space inside strings kept), and is a copy of the caller's.
func TestMakeKeepsCompactDataAndCompactsSpacedData(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x y","b":[1,2]}`:                  `{"a":"x y","b":[1,2]}`,
		"{ \"a\" : \"x y\" ,\n\t\"b\": [1, 2] }": `{"a":"x y","b":[1,2]}`,
		`{"a":"\u00e9<&>"}`:                      `{"a":"\u00e9<&>"}`,
	} {
		raw := []byte(in)
		e := mustMake(t, json.RawMessage(raw))
		if string(e.Data) != want {
			t.Errorf("Make(%q).Data = %q, want %q", in, e.Data, want)
		}
		raw[1] = 'X'
		if string(e.Data) != want {
			t.Errorf("Make(%q).Data changed with the caller's buffer: %q", in, e.Data)
		}
	}
}
