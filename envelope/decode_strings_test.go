package envelope

import "testing"

// The string members are decoded into one allocation; duplicate keys still follow the
// last-one-wins rule, a later meta replaces an earlier one whole, and escaped values are
// unescaped.
func TestDecodeStringMembers(t *testing.T) {
	for _, tc := range []struct {
		name, body                  string
		job, trace, id, queue, lang string
	}{
		{"plain", `{"job":"urn:a","trace_id":"t1","data":{},"meta":{"id":"i1","queue":"q","lang":"php","schema_version":1},"attempts":0}`,
			"urn:a", "t1", "i1", "q", "php"},
		{"duplicate trace_id: last wins", `{"job":"urn:a","trace_id":"t1","trace_id":"t2","data":{},"meta":{"id":"i"}}`,
			"urn:a", "t2", "i", "", ""},
		{"null trace_id after a string", `{"job":"urn:a","trace_id":"t1","trace_id":null,"meta":{}}`,
			"urn:a", "", "", "", ""},
		{"second meta replaces the first whole", `{"job":"urn:a","trace_id":"t","meta":{"id":"i1","queue":"q1"},"meta":{"lang":"go"}}`,
			"urn:a", "t", "", "", "go"},
		{"escaped values", `{"urn":"urn:\u00e9","trace_id":"a\"b","meta":{"id":"\\x","queue":"q"}}`,
			"urn:é", `a"b`, `\x`, "q", ""},
		{"blank job falls back to urn", `{"job":"  ","urn":"urn:b","trace_id":"t"}`,
			"urn:b", "t", "", "", ""},
	} {
		e, err := Decode([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := []string{e.Job, e.TraceID, e.Meta.ID, e.Meta.Queue, e.Meta.Lang}
		want := []string{tc.job, tc.trace, tc.id, tc.queue, tc.lang}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: member %d = %q, want %q", tc.name, i, got[i], want[i])
			}
		}
	}
}

func TestDecodeAllocations(t *testing.T) {
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1},"attempts":0}`)
	n := testing.AllocsPerRun(100, func() {
		if _, err := Decode(body); err != nil {
			t.Fatal(err)
		}
	})
	if n > 2 {
		t.Errorf("Decode made %v allocations, want at most 2 (the envelope and its strings)", n)
	}
}
