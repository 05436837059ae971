package schema_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/schema"
)

func harms(ds []schema.Divergence) []schema.Harm {
	var out []schema.Harm
	for _, d := range ds {
		out = append(out, d.Harm)
	}
	return out
}

// TestDivergencesCoverTheTable: every row of the keyword table where the Python SDK
// 1.24.0 gives another verdict (TestPythonVerdicts checks it does) is caught before it
// hurts: where Python rejects valid data, the schema or the data has a RejectsValid
// divergence; where it accepts invalid data, the schema has an AcceptsInvalid one. A
// schema built only from the subset Python checks has no AcceptsInvalid divergence.
func TestDivergencesCoverTheTable(t *testing.T) {
	for _, c := range keywordCases(t) {
		s := c.compile(t)
		found := append(s.Divergences(), schema.DataDivergences(c.Data)...)
		pyValid := c.Valid
		if c.Python != "same" {
			pyValid = c.Python == "valid"
		}
		switch {
		case c.Valid && !pyValid && !slices.Contains(harms(found), schema.RejectsValid):
			t.Errorf("%s: Python rejects valid data, and no RejectsValid divergence says so: %v", c.Name, found)
		case !c.Valid && pyValid && !slices.Contains(harms(found), schema.AcceptsInvalid):
			t.Errorf("%s: Python accepts invalid data, and no AcceptsInvalid divergence says so: %v", c.Name, found)
		}
		if strings.HasPrefix(c.Name, "subset/") && slices.Contains(harms(found), schema.AcceptsInvalid) {
			t.Errorf("%s: a schema of the subset has an AcceptsInvalid divergence: %v", c.Name, found)
		}
	}
}

func TestDivergences(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		want         []string // "location keyword harm"
	}{
		{"subset only", `{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1,"enum":["x","y"]},"n":{"type":"integer","minimum":1},"l":{"type":"array","items":{"type":"boolean"}}},"additionalProperties":false}`, nil},
		{"integer in const", `{"type":"object","properties":{"v":{"const":1}}}`, []string{"#/properties/v/const const rejects-valid"}},
		{"integer in enum, written 1e2", `{"enum":[1e2,"x",1.5]}`, []string{"#/enum enum rejects-valid"}},
		{"no integer in enum", `{"enum":[1.5,"x",null,true]}`, nil},
		{"true beside additionalProperties false", `{"type":"object","properties":{"a":true,"b":{}},"additionalProperties":false}`, []string{"#/properties/a properties rejects-valid"}},
		{"true without additionalProperties false", `{"type":"object","properties":{"a":true}}`, nil},
		{"patternProperties beside additionalProperties false", `{"type":"object","patternProperties":{"^x-":{}},"additionalProperties":false}`,
			[]string{"#/patternProperties patternProperties rejects-valid"}},
		{"patternProperties alone", `{"type":"object","patternProperties":{"^x-":{"type":"string"}}}`, []string{"#/patternProperties patternProperties accepts-invalid"}},
		{"nested const", `{"const":{"a":[true]}}`, []string{"#/const const accepts-invalid"}},
		{"minimum beyond 2^53", `{"type":"integer","minimum":9007199254740993}`, []string{"#/minimum minimum accepts-invalid"}},
		{"minimum a float64 holds", `{"type":"number","minimum":0.1}`, nil},
		{"minimum without a type", `{"minimum":1}`, []string{"#/minimum minimum accepts-invalid"}},
		{"false subschema", `{"type":"object","properties":{"a":false}}`, []string{"#/properties/a properties accepts-invalid"}},
		{"not visited under oneOf", `{"oneOf":[{"enum":[1]}]}`, []string{"#/oneOf oneOf accepts-invalid"}},
		{"format in 2020-12 is an annotation", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"string","format":"email"}`, nil},
		{"format in draft-07 is asserted", `{"type":"string","format":"email"}`, []string{"#/format format accepts-invalid"}},
		{"marks Python misreads", `{"type":"object","properties":{
			"a.b":{"x-gdpr-sensitive":true},
			"tags[]":{"x-gdpr-sensitive":true},
			"":{"x-gdpr-sensitive":true},
			"m":{"type":"array","items":{"type":"array","items":{"type":"object","properties":{"v":{"x-gdpr-sensitive":true}}}}},
			"p":{"type":"object","x-gdpr-sensitive":true,"properties":{"q":{"x-gdpr-sensitive":true}}},
			"ok":{"type":"object","properties":{"":{"x-gdpr-sensitive":true},"list":{"type":"array","items":{"x-gdpr-sensitive":true}}}}}}`,
			[]string{"#/properties/ x-gdpr-sensitive mark-misread", "#/properties/a.b x-gdpr-sensitive mark-misread",
				"#/properties/m/items/items/properties/v x-gdpr-sensitive mark-misread", "#/properties/p/properties/q x-gdpr-sensitive mark-misread",
				"#/properties/tags[] x-gdpr-sensitive mark-misread"}},
	} {
		s, err := schema.Compile("urn:x", []byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, d := range s.Divergences() {
			got = append(got, d.Location+" "+d.Keyword+" "+d.Harm.String())
			if d.Detail == "" {
				t.Errorf("%s: %v has no detail", tc.name, d)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
		wantPortable := !strings.Contains(strings.Join(tc.want, " "), "mark-misread")
		if err := s.PortableMarks(); (err == nil) != wantPortable || (err != nil && !errors.Is(err, schema.ErrMarkNotPortable)) {
			t.Errorf("%s: PortableMarks() = %v", tc.name, err)
		}
	}
}

func TestDataDivergences(t *testing.T) {
	got := schema.DataDivergences([]byte(`{"a":1e400,"b":[1,-1e999],"c":1.7976931348623157e308,"d":"1e400","e":1` + strings.Repeat("0", 400) + `}`))
	var where []string
	for _, d := range got {
		where = append(where, d.Location)
		if d.Harm != schema.RejectsValid || d.Keyword != "" {
			t.Errorf("%v", d)
		}
	}
	if want := []string{"/a", "/b/1", "/e"}; !slices.Equal(where, want) {
		t.Fatalf("DataDivergences at %q, want %q", where, want)
	}
	if got := schema.DataDivergences([]byte(`not json`)); got != nil {
		t.Fatalf("not JSON: %v", got)
	}
}
