package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Harm says what a [Divergence] does to a fleet whose workers are written with
// different SDKs of the family.
type Harm int

const (
	// RejectsValid: the Python SDK 1.24.0's validator rejects, or fails on, data that
	// JSON Schema accepts. Data a Go producer checked and published is dead-lettered by
	// a Python consumer that checks it.
	RejectsValid Harm = iota + 1
	// AcceptsInvalid: the Python SDK 1.24.0's validator accepts data that JSON Schema
	// rejects. Data a Python producer checked and published is dead-lettered by a Go
	// consumer that checks it.
	AcceptsInvalid
	// MarkMisread: an x-gdpr-sensitive mark at a place the Python SDK 1.24.0's field
	// encryption does not read as Go does. Its producer publishes that field in clear (or
	// encrypts another field), and its consumer hands the ciphertext of a Go producer to
	// its handler, or fails the message.
	MarkMisread
)

// String names the harm.
func (h Harm) String() string {
	switch h {
	case RejectsValid:
		return "rejects-valid"
	case AcceptsInvalid:
		return "accepts-invalid"
	case MarkMisread:
		return "mark-misread"
	default:
		return fmt.Sprintf("Harm(%d)", int(h))
	}
}

// Divergence is a place where another SDK of the family evaluates a schema, or reads
// data, differently from this package. The Python SDK 1.24.0 is the SDK each one was
// verified against (schema/PARITY.md); the family's other subset validators share its
// keyword list.
type Divergence struct {
	// Location is where: the JSON pointer of the keyword in the schema document after
	// a "#" ("#/properties/qty/enum"), or, for a value of data, its JSON pointer ("/qty").
	Location string
	// Keyword is the keyword concerned ("enum", "patternProperties", "x-gdpr-sensitive",
	// ...); "" for a value of data.
	Keyword string
	// Harm is what the difference does to a mixed fleet.
	Harm Harm
	// Detail says what differs and what a mixed fleet should do about it.
	Detail string
}

// String is the location, the harm and the detail on one line.
func (d Divergence) String() string {
	return fmt.Sprintf("%s (%s): %s", d.Location, d.Harm, d.Detail)
}

// ErrMarkNotPortable matches the error of [Schema.PortableMarks].
var ErrMarkNotPortable = errors.New("schema: x-gdpr-sensitive mark at a path the Python SDK does not read as Go does")

// Divergences lists the places where the Python SDK 1.24.0's validator, or its field
// encryption, treats this schema differently from this package, in location order
// (schema/PARITY.md has the table and the verified inputs). It looks at the schema
// only; [DataDivergences] looks at data. A schema that keeps to the family's subset
// (type, required, properties, additionalProperties: false, items, enum and const of
// strings, minLength, minimum) has none.
func (s *Schema) Divergences() []Divergence {
	w := &divergenceWalker{formatAsserted: s.formatAsserted}
	w.visit(s.doc, "")
	out := append(w.out, s.markIssues...)
	slices.SortStableFunc(out, func(a, b Divergence) int { return strings.Compare(a.Location, b.Location) })
	return out
}

// PortableMarks returns nil when the Python SDK 1.24.0 reads every x-gdpr-sensitive
// mark of the schema at the place Go does, and otherwise an error matching
// [ErrMarkNotPortable] that names each mark it does not: a mark under an array of
// arrays, on a property whose name holds a "." or ends in "[]", on a property of data
// named "", or under a marked object or array. Package fieldcrypt refuses such a
// schema when told to (fieldcrypt.WithPortablePathsOnly).
func (s *Schema) PortableMarks() error {
	if len(s.markIssues) == 0 {
		return nil
	}
	parts := make([]string, len(s.markIssues))
	for i, d := range s.markIssues {
		parts[i] = d.Location + ": " + d.Detail
	}
	return fmt.Errorf("%w: %s: %s", ErrMarkNotPortable, s.urn, strings.Join(parts, "; "))
}

// DataDivergences lists the values of data (the raw JSON of a data block) that the
// Python SDK 1.24.0 reads differently from JSON: a number beyond the float64 range.
// Python reads 1e400 as infinity (not an integer for its validator, and poison for its
// runtime) and fails a check of "minimum" on an integer that large. Data that is not
// JSON has none.
func DataDivergences(data []byte) []Divergence {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	var out []Divergence
	var walk func(v any, ptr string)
	walk = func(v any, ptr string) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(x) {
				walk(x[k], ptr+"/"+escape(k))
			}
		case []any:
			for i, e := range x {
				walk(e, ptr+"/"+strconv.Itoa(i))
			}
		case json.Number:
			if f, err := strconv.ParseFloat(string(x), 64); err != nil && math.IsInf(f, 0) {
				out = append(out, Divergence{Location: ptr, Harm: RejectsValid, Detail: string(x) +
					" is beyond the float64 range: the Python SDK reads it as infinity, calls it no integer and its runtime dead-letters the message as poison " +
					"(or, written as an integer, fails \"minimum\" with an OverflowError); keep numbers within ±1.8e308, or send them as strings"})
			}
		}
	}
	walk(v, "")
	return out
}

// divergenceWalker walks a schema document the way the Python SDK 1.24.0's validator
// does: from the root, into "properties" of a node typed "object" and into an object
// "items" of a node typed "array", and nowhere else.
type divergenceWalker struct {
	formatAsserted bool
	out            []Divergence
}

const (
	pythonSkips = "the Python SDK 1.24.0 does not check %s: data a Python producer publishes may be dead-lettered by a Go consumer"
	pythonLax   = "%s: data a Python producer publishes may be dead-lettered by a Go consumer"
)

func (w *divergenceWalker) add(loc, keyword string, h Harm, detail string) {
	w.out = append(w.out, Divergence{Location: "#" + loc, Keyword: keyword, Harm: h, Detail: detail})
}

// Keywords with no say in a verdict, or only holding subschemas reached by "$ref".
var neutralKeywords = map[string]bool{
	SensitiveKeyword: true, "$schema": true, "$id": true, "id": true, "$anchor": true, "$dynamicAnchor": true,
	"$vocabulary": true, "$comment": true, "title": true, "description": true, "default": true, "examples": true,
	"readOnly": true, "writeOnly": true, "deprecated": true, "definitions": true, "$defs": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true,
}

// typedKeywords are the keywords of the subset that the Python SDK reads only under one
// value of "type".
var typedKeywords = map[string]string{
	"required": "object", "properties": "object", "additionalProperties": "object",
	"items": "array", "minLength": "string", "minimum": "integer",
}

func (w *divergenceWalker) visit(node any, loc string) {
	m, ok := node.(map[string]any)
	if !ok {
		return
	}
	if v, ok := m["const"]; ok {
		w.values(loc+"/const", "const", []any{v})
	}
	if v, ok := m["enum"].([]any); ok {
		w.values(loc+"/enum", "enum", v)
	}
	typ, _ := m["type"].(string)
	if _, list := m["type"].([]any); list {
		w.add(loc+"/type", "type", AcceptsInvalid, fmt.Sprintf(pythonLax,
			"a list of types is ignored by the Python SDK 1.24.0, with every keyword it reads only under one type"))
	}
	for _, k := range sortedKeys(m) {
		switch {
		case k == "const" || k == "enum" || k == "type" || neutralKeywords[k]:
		case typedKeywords[k] != "":
			want := typedKeywords[k]
			if typ == want || (want == "integer" && typ == "number") {
				continue
			}
			if want == "integer" {
				want = "integer or number"
			}
			w.add(loc+"/"+escape(k), k, AcceptsInvalid, fmt.Sprintf(pythonLax,
				fmt.Sprintf("the Python SDK 1.24.0 reads %q only beside \"type\": %q; here it does not check it", k, want)))
		case k == "format" && !w.formatAsserted:
		case k == "patternProperties" && typ == "object" && m["additionalProperties"] == false:
			// Python calls every property it matches additional: w.object says so.
		case k == "$ref":
			w.add(loc+"/$ref", k, AcceptsInvalid, fmt.Sprintf(pythonSkips, "what \"$ref\" points to"))
		default:
			w.add(loc+"/"+escape(k), k, AcceptsInvalid, fmt.Sprintf(pythonSkips, strconv.Quote(k)))
		}
	}
	switch typ {
	case "object":
		w.object(m, loc)
	case "array":
		switch items := m["items"].(type) {
		case map[string]any:
			w.visit(items, loc+"/items")
		case []any:
			w.add(loc+"/items", "items", AcceptsInvalid, fmt.Sprintf(pythonSkips, "a list of \"items\" schemas"))
		case bool:
			if !items {
				w.add(loc+"/items", "items", AcceptsInvalid, fmt.Sprintf(pythonSkips, "\"items\": false"))
			}
		}
	case "integer", "number":
		if n, ok := m["minimum"].(json.Number); ok && !float64Exact(n) {
			w.add(loc+"/minimum", "minimum", AcceptsInvalid, fmt.Sprintf(pythonLax,
				"the Python SDK 1.24.0 compares \"minimum\" as float64, and "+string(n)+" is not one (beyond 2^53, or more digits than a float64 holds): a value just below it can pass there"))
		}
	}
}

func (w *divergenceWalker) object(m map[string]any, loc string) {
	props, _ := m["properties"].(map[string]any)
	closed := m["additionalProperties"] == false
	for _, name := range sortedKeys(props) {
		at := loc + "/properties/" + escape(name)
		switch sub := props[name].(type) {
		case map[string]any:
			w.visit(sub, at)
		case bool:
			switch {
			case sub && closed:
				w.add(at, "properties", RejectsValid, "the Python SDK 1.24.0 does not read a boolean subschema and, with \"additionalProperties\": false, rejects the property as additional: "+
					"data a Go producer publishes is dead-lettered by a Python consumer; write {} instead of true")
			case !sub && !closed:
				w.add(at, "properties", AcceptsInvalid, fmt.Sprintf(pythonLax, "the Python SDK 1.24.0 does not read a false subschema: it accepts the property"))
			}
		}
	}
	if pp, ok := m["patternProperties"].(map[string]any); ok && len(pp) > 0 && closed {
		w.add(loc+"/patternProperties", "patternProperties", RejectsValid, "the Python SDK 1.24.0 does not read \"patternProperties\" and, with \"additionalProperties\": false, rejects every property it matches as additional: "+
			"data a Go producer publishes is dead-lettered by a Python consumer; list those properties under \"properties\", or drop \"additionalProperties\": false")
	}
	if _, ok := m["additionalProperties"].(map[string]any); ok {
		w.add(loc+"/additionalProperties", "additionalProperties", AcceptsInvalid, fmt.Sprintf(pythonSkips, "a schema-valued \"additionalProperties\""))
	}
}

// values looks at the values of a const or an enum. The Python SDK 1.24.0 compares a
// value with its Python type (1 is not 1.0) but compares inside arrays and objects with
// Python's == (true is 1 there).
func (w *divergenceWalker) values(loc, keyword string, vals []any) {
	var integral, nested []string
	for _, v := range vals {
		switch x := v.(type) {
		case json.Number:
			if r, ok := new(big.Rat).SetString(string(x)); ok && r.IsInt() {
				integral = append(integral, string(x))
			}
		case map[string]any, []any:
			if holdsBoolish(x) {
				nested = append(nested, "an array or object holding true, false, 0 or 1")
			}
		}
	}
	if len(integral) > 0 {
		w.add(loc, keyword, RejectsValid, fmt.Sprintf("holds %s, an integer-valued number: the Python SDK 1.24.0 compares numbers with their Python type, so 1 and 1.0 (or 1e0) differ there: "+
			"data a Go producer publishes is dead-lettered by a Python consumer when its number is spelled the other way; write such numbers as integers (1, not 1.0) in the schema and in data", strings.Join(integral, ", ")))
	}
	if len(nested) > 0 {
		w.add(loc, keyword, AcceptsInvalid, fmt.Sprintf(pythonLax, "inside arrays and objects the Python SDK 1.24.0 compares with Python's ==, where true is 1 and false is 0"))
	}
}

func holdsBoolish(v any) bool {
	switch x := v.(type) {
	case bool:
		return true
	case json.Number:
		r, ok := new(big.Rat).SetString(string(x))
		return ok && (r.Sign() == 0 || r.Cmp(big.NewRat(1, 1)) == 0)
	case map[string]any:
		for _, e := range x {
			if holdsBoolish(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if holdsBoolish(e) {
				return true
			}
		}
	}
	return false
}

// float64Exact reports whether the number n is the value of a float64 written
// shortest, so comparing it as a float64 gives JSON Schema's answer.
func float64Exact(n json.Number) bool {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return false
	}
	want, ok := new(big.Rat).SetString(string(n))
	got, ok2 := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && ok2 && want.Cmp(got) == 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
