package redis

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// frameSentinel is the member that marks a list element as a frame (SPEC §7): an element
// {"__bq_frame":1,"headers":{…},"body":"<envelope as a JSON string>"} carries out-of-band
// headers beside the envelope. An envelope never has this member.
const frameSentinel = "__bq_frame"

// element returns what is stored in the list for body and headers in the default
// layout: without headers (blank ones are dropped, as the other SDKs do) the body, byte
// for byte, unless it would itself read as a frame: then it is framed with no headers, so
// the consumer hands back exactly body. A body that is not valid UTF-8 cannot ride in a
// JSON string: it is stored bare and its headers are dropped (the second result).
func element(body []byte, headers map[string]string) (el []byte, dropped bool) {
	kept := nonBlank(headers)
	switch {
	case kept == nil && !isFrame(body):
		return body, false
	case kept != nil && !utf8.Valid(body):
		return body, true
	case kept == nil:
		kept = map[string]string{}
	}
	return encodeJSON(struct {
		Frame   int               `json:"__bq_frame"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}{1, kept, string(body)}), false
}

// encodeJSON is v as JSON, map keys sorted and without HTML escaping.
func encodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings and maps of strings always encode
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// nonBlank is h without the headers of a blank name or value; nil when none is left.
func nonBlank(h map[string]string) map[string]string {
	var kept map[string]string
	for k, v := range h {
		if k != "" && v != "" {
			if kept == nil {
				kept = make(map[string]string, len(h))
			}
			kept[k] = v
		}
	}
	return kept
}

// isFrame reports whether el reads as a frame.
func isFrame(el []byte) bool {
	_, _, ok := unframe(el)
	return ok
}

// unframe splits a frame into the envelope bytes and the headers. ok is false for any
// element that is not exactly a frame (then the element is the body as it is): the
// element must be valid UTF-8, a JSON object whose "__bq_frame" member is 1, whose
// "body" member is a string and whose "headers" member, when present, is an object of
// strings. Member names match as spelled.
func unframe(el []byte) (body []byte, headers map[string]string, ok bool) {
	t := bytes.TrimLeft(el, " \t\r\n")
	if len(t) == 0 || t[0] != '{' || !bytes.Contains(el, []byte(`"`+frameSentinel+`"`)) || !utf8.Valid(el) {
		return nil, nil, false
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(el, &members); err != nil {
		return nil, nil, false
	}
	if string(bytes.TrimSpace(members[frameSentinel])) != "1" {
		return nil, nil, false
	}
	rawBody, has := members["body"]
	if !has {
		return nil, nil, false
	}
	var s string
	if err := json.Unmarshal(rawBody, &s); err != nil {
		return nil, nil, false
	}
	if rh, has := members["headers"]; has && string(bytes.TrimSpace(rh)) != "null" {
		if err := json.Unmarshal(rh, &headers); err != nil {
			return nil, nil, false
		}
	}
	return []byte(s), nonBlank(headers), true
}

// unwrap is what the runtime sees of a stored element: a frame's body and headers
// (default layout), or the element with the headers JSON kept beside it, hdr (Laravel).
// The body is a copy of the element.
func (t *Transport) unwrap(el, hdr string) ([]byte, map[string]string) {
	raw := []byte(el)
	if !t.laravel {
		if body, headers, ok := unframe(raw); ok {
			return body, headers
		}
	}
	var hs map[string]string
	if hdr == "" || json.Unmarshal([]byte(hdr), &hs) != nil || len(hs) == 0 {
		hs = nil
	}
	return raw, hs
}
