package envelope

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestRemoveDeadLetter(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"job":"u","attempts":3,"dead_letter":{"reason":"failed"}}`, `{"job":"u","attempts":3}`},
		{`{"dead_letter":{"a":[1,{"b":2}]},"job":"u"}`, `{"job":"u"}`},
		{`{"dead_letter":{}}`, `{}`},
		{`{ "job" : "u" , "dead_letter" : null }`, `{ "job" : "u" }`},
		{`{"job":"u","d\u0065ad_letter":1,"x":1e400}`, `{"job":"u","x":1e400}`},
		{`{"job":"u","dead_letter":1,"dead_letter":2}`, `{"job":"u"}`},
		{`{"job":"u","data":{"dead_letter":1}}`, `{"job":"u","data":{"dead_letter":1}}`},
		{`{"job":"u"}`, `{"job":"u"}`},
	} {
		got, err := RemoveDeadLetter([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("RemoveDeadLetter(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("RemoveDeadLetter(%s) is not JSON: %s", tc.in, got)
		}
	}
	if _, err := RemoveDeadLetter([]byte(`[1]`)); !errors.Is(err, ErrNotObject) {
		t.Errorf("array: %v", err)
	}
}

func FuzzRemoveDeadLetter(f *testing.F) {
	f.Add([]byte(`{"job":"u","dead_letter":{"reason":"failed"},"attempts":3}`))
	f.Add([]byte(`{"dead_letter":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := RemoveDeadLetter(body)
		if err != nil {
			return
		}
		if !json.Valid(got) {
			t.Fatalf("RemoveDeadLetter(%q) = %q is not JSON", body, got)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(got, &m) == nil {
			if _, has := m["dead_letter"]; has {
				t.Fatalf("dead_letter survived in %q", got)
			}
		}
	})
}
