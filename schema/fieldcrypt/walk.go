package fieldcrypt

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/babelqueue-go/babelqueue/schema"
)

// leafFunc transforms the raw JSON value at pointer ptr. It returns the replacement, or
// nil to leave the value as it is.
type leafFunc func(raw []byte, ptr string) ([]byte, error)

// apply runs leaf on every value of raw (a JSON value) at any of paths (each non-empty),
// and returns raw with the replacements made, or nil when nothing changed. Each object on
// the way is split once, whatever the number of paths through it, and rebuilt in its
// order with its other members' bytes untouched. A place whose value has another shape
// than the path expects (a missing key, a string where an object should be) is skipped,
// as the family does.
func apply(raw []byte, paths [][]schema.Step, ptr string, leaf leafFunc) ([]byte, error) {
	members, ok, err := splitObject(raw)
	if !ok || err != nil {
		return nil, err
	}
	changed := false
	for i := range members {
		var (
			rests [][]schema.Step
			here  bool
			items int
		)
		for _, p := range paths {
			if p[0].Property != members[i].key {
				continue
			}
			items = p[0].Items
			if len(p) == 1 {
				here = true // the schema leaves out marks under a marked value
			} else {
				rests = append(rests, p[1:])
			}
		}
		if !here && rests == nil {
			continue
		}
		nv, err := applyItems(members[i].val, items, here, rests, ptr+"/"+escape(members[i].key), leaf)
		if err != nil {
			return nil, err
		}
		if nv != nil {
			members[i].val, changed = nv, true
		}
	}
	if !changed {
		return nil, nil
	}
	return joinObject(members), nil
}

// applyItems descends items array levels of val, then runs leaf on the value (here) or
// goes on along rests.
func applyItems(val []byte, items int, here bool, rests [][]schema.Step, ptr string, leaf leafFunc) ([]byte, error) {
	if items == 0 {
		if here {
			return leaf(val, ptr)
		}
		return apply(val, rests, ptr, leaf)
	}
	elems, ok, err := splitArray(val)
	if !ok || err != nil {
		return nil, err
	}
	changed := false
	for i := range elems {
		nv, err := applyItems(elems[i], items-1, here, rests, ptr+"/"+strconv.Itoa(i), leaf)
		if err != nil {
			return nil, err
		}
		if nv != nil {
			elems[i], changed = nv, true
		}
	}
	if !changed {
		return nil, nil
	}
	return joinArray(elems), nil
}

type member struct {
	key string
	val json.RawMessage
}

// splitObject returns the members of raw in order; ok is false when raw is not an object.
func splitObject(raw []byte) (members []member, ok bool, err error) {
	dec, ok := opening(raw, '{')
	if !ok {
		return nil, false, nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, true, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, true, err
		}
		members = append(members, member{key: key, val: v})
	}
	return members, true, nil
}

// splitArray returns the elements of raw; ok is false when raw is not an array.
func splitArray(raw []byte) (elems []json.RawMessage, ok bool, err error) {
	dec, ok := opening(raw, '[')
	if !ok {
		return nil, false, nil
	}
	for dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, true, err
		}
		elems = append(elems, v)
	}
	return elems, true, nil
}

// opening returns a decoder past the opening delimiter of raw, when raw starts with it.
func opening(raw []byte, delim byte) (*json.Decoder, bool) {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 || b[0] != delim {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	return dec, true
}

func joinObject(members []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(m.key))
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func joinArray(elems []json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// canonical returns the canonical JSON of a value: compact, object keys sorted, numbers
// as written, no HTML escaping.
func canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return encode(v)
}

func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) []byte {
	b, _ := encode(s) // a string always encodes
	return b
}

// compact returns plain, which must be one JSON value, without insignificant space.
func compact(plain []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, plain); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
