package redis

import (
	"bytes"
	"maps"
	"testing"
)

func TestElementWithoutHeadersIsTheBody(t *testing.T) {
	body := []byte(`{"job":"urn:babel:orders:created","data":{"x":"<&>"},"attempts":0}`)
	el, dropped := element(body, nil)
	if dropped || !bytes.Equal(el, body) {
		t.Fatalf("element = %q (dropped %v), want the body unchanged", el, dropped)
	}
	el, _ = element(body, map[string]string{"": "x", "k": ""})
	if !bytes.Equal(el, body) {
		t.Fatalf("blank headers framed the body: %q", el)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	body := []byte(`{"job":"urn:babel:x:y","s":"Caf\u00e9 \"q\" <&> ` + "\u2028" + `","n":1e400}`)
	headers := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant": "acme é"}
	el, dropped := element(body, headers)
	if dropped {
		t.Fatal("headers dropped for a UTF-8 body")
	}
	if !bytes.HasPrefix(el, []byte(`{"__bq_frame":1,"headers":{`)) {
		t.Fatalf("frame does not start with the sentinel: %q", el)
	}
	got, gotH, ok := unframe(el)
	if !ok {
		t.Fatalf("frame %q did not unframe", el)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("body after the frame = %q, want %q", got, body)
	}
	if !maps.Equal(gotH, headers) {
		t.Errorf("headers = %v, want %v", gotH, headers)
	}
}

func TestBodyThatLooksLikeAFrameIsEscaped(t *testing.T) {
	body := []byte(`{"__bq_frame":1,"headers":{"a":"b"},"body":"looks like a frame"}`)
	el, _ := element(body, nil)
	got, h, ok := unframe(el)
	if !ok || !bytes.Equal(got, body) || h != nil {
		t.Fatalf("unframe(element(frame-like body)) = %q, %v, %v; want the body back with no headers", got, h, ok)
	}
}

func TestNonUTF8BodyWithHeadersIsStoredBare(t *testing.T) {
	body := []byte{'{', '"', 'j', '"', ':', '"', 0xff, '"', '}'}
	el, dropped := element(body, map[string]string{"a": "b"})
	if !dropped || !bytes.Equal(el, body) {
		t.Fatalf("element = %q (dropped %v), want the bytes unchanged and the headers dropped", el, dropped)
	}
}

func TestUnframeRejectsLookalikes(t *testing.T) {
	for _, el := range []string{
		`{"__bq_frame":2,"headers":{},"body":"x"}`,
		`{"__BQ_FRAME":1,"headers":{},"body":"x"}`,
		`{"__bq_frame":1,"headers":{},"body":1}`,
		`{"__bq_frame":1,"headers":{"a":1},"body":"x"}`,
		`{"__bq_frame":1,"headers":[],"body":"x"}`,
		`{"__bq_frame":1,"headers":{}}`,
		`{"__bq_frame":"1","body":"x"}`,
		`[{"__bq_frame":1,"body":"x"}]`,
		"{\"__bq_frame\":1,\"body\":\"\xff\"}",
		`{"__bq_frame":1,"body":"x"`,
	} {
		if b, h, ok := unframe([]byte(el)); ok {
			t.Errorf("unframe(%q) = %q, %v: a non-frame was unframed", el, b, h)
		}
	}
}

// FuzzUnframe checks that no element a broker hands over panics the consumer, and that
// whatever unframes re-frames to the same body and headers.
func FuzzUnframe(f *testing.F) {
	f.Add([]byte(`{"__bq_frame":1,"headers":{"a":"b"},"body":"{}"}`))
	f.Add([]byte(`{"__bq_frame":1,"body":"\ud800"}`))
	f.Add([]byte("{\"__bq_frame\":1,\"body\":\"\\u0000\"}"))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, el []byte) {
		body, h, ok := unframe(el)
		if !ok {
			return
		}
		el2, _ := element(body, h)
		body2, h2, ok2 := unframe(el2)
		if len(h) == 0 && !ok2 {
			if !bytes.Equal(el2, body) {
				t.Fatalf("bare element %q != body %q", el2, body)
			}
			return
		}
		if !ok2 || !bytes.Equal(body2, body) || !maps.Equal(h, h2) {
			t.Fatalf("re-frame changed the message: %q %v -> %q %v", body, h, body2, h2)
		}
	})
}
