package schema_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// keywordCase is one row of testdata/keywords.json.
type keywordCase struct {
	Name    string          `json:"name"`
	Schema  json.RawMessage `json:"schema"`
	Data    json.RawMessage `json:"data"`
	Valid   bool            `json:"valid"`
	Pointer string          `json:"pointer"`
	Keyword string          `json:"keyword"`
	Python  string          `json:"python"`
	Note    string          `json:"note"`
	Options struct {
		FormatAssertion bool `json:"format_assertion"`
	} `json:"options"`
}

func (c keywordCase) compile(t *testing.T) *schema.Schema {
	t.Helper()
	var opts []schema.Option
	if c.Options.FormatAssertion {
		opts = append(opts, schema.WithFormatAssertion())
	}
	s, err := schema.Compile("urn:babel:test:"+c.Name, c.Schema, opts...)
	if err != nil {
		t.Fatalf("%s: compile: %v", c.Name, err)
	}
	return s
}

func keywordCases(t *testing.T) []keywordCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "keywords.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []keywordCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	return table.Cases
}

// TestKeywordTable runs every row of the keyword table: the verdict, and for invalid
// data the pointer and the rule of the first violation, which the error names.
func TestKeywordTable(t *testing.T) {
	for _, c := range keywordCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			s := c.compile(t)
			err := s.Validate(c.Data)
			if c.Valid {
				if err != nil {
					t.Fatalf("valid data rejected: %v", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("invalid data: got %v, want a *ValidationError", err)
			}
			if ve.Pointer != c.Pointer || ve.Keyword != c.Keyword {
				t.Fatalf("violation at %q of %q, want at %q of %q (%v)", ve.Pointer, ve.Keyword, c.Pointer, c.Keyword, err)
			}
			if ve.URN != s.URN() || !strings.Contains(err.Error(), s.URN()) || !strings.Contains(err.Error(), `"`+c.Keyword+`"`) {
				t.Fatalf("error text %q does not name the URN and the rule", err)
			}
			if c.Pointer != "" && !strings.Contains(err.Error(), c.Pointer) {
				t.Fatalf("error text %q does not name the pointer", err)
			}
		})
	}
}

// TestFirstViolationIsStable: with several violations the one reported is the same on
// every run (the smallest pointer), whatever order the validator visits a map in.
func TestFirstViolationIsStable(t *testing.T) {
	s, err := schema.Compile("urn:babel:test:many", []byte(`{"type":"object","properties":{
		"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"},
		"e":{"type":"integer"},"f":{"type":"integer"},"g":{"type":"integer"},"h":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"h":"x","g":"x","f":"x","e":"x","d":"x","c":"x","b":"x","a":"x"}`)
	for range 50 {
		var ve *schema.ValidationError
		if err := s.Validate(data); !errors.As(err, &ve) || ve.Pointer != "/a" {
			t.Fatalf("got %v, want the violation at /a", err)
		}
	}
}

// TestConformancePayloadCases runs the payload_schema blocks of the public cross-SDK
// conformance manifest (payload_schema, payload_schema_unicode) when the manifest in
// use carries them; the keyword table holds the same facts either way.
func TestConformancePayloadCases(t *testing.T) {
	dir := transporttest.ConformanceDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for name, block := range blocks {
		if !strings.HasPrefix(name, "payload_schema") {
			continue
		}
		var b struct {
			Schema json.RawMessage `json:"schema"`
			Cases  []struct {
				Name  string          `json:"name"`
				Valid bool            `json:"valid"`
				Data  json.RawMessage `json:"data"`
			} `json:"cases"`
		}
		if err := json.Unmarshal(block, &b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := schema.Compile("urn:babel:conformance:"+name, b.Schema)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range b.Cases {
			if err := s.Validate(c.Data); (err == nil) != c.Valid {
				t.Errorf("%s/%s: got %v, want valid=%v", name, c.Name, err, c.Valid)
			}
			ran++
		}
	}
	t.Logf("%d payload cases from %s", ran, dir)
}

// TestSensitiveValueNotShown: a violation at or under an x-gdpr-sensitive path names
// the place and the rule but never the value; elsewhere the validator's text is kept.
func TestSensitiveValueNotShown(t *testing.T) {
	s, err := schema.Compile("urn:babel:users:registered", []byte(`{"type":"object","properties":{
		"email":{"type":"string","format":"email","x-gdpr-sensitive":"email"},
		"profile":{"type":"object","x-gdpr-sensitive":true,"properties":{"tckn":{"type":"string","pattern":"^[0-9]{11}$"}}},
		"addresses":{"type":"array","items":{"type":"object","properties":{"line":{"type":"string","enum":["x"],"x-gdpr-sensitive":true}}}},
		"locale":{"type":"string","pattern":"^[a-z]{2}-[A-Z]{2}$"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ data, secret, pointer string }{
		{`{"email":"alice.secret@"}`, "alice.secret", "/email"},
		{`{"profile":{"tckn":"12345-SECRET"}}`, "12345-SECRET", "/profile/tckn"},
		{`{"addresses":[{"line":"x"},{"line":"Secret Street 1"}]}`, "Secret Street", "/addresses/1/line"},
	} {
		err := s.Validate([]byte(tc.data))
		var ve *schema.ValidationError
		if !errors.As(err, &ve) || ve.Pointer != tc.pointer {
			t.Fatalf("%s: got %v, want a violation at %s", tc.data, err, tc.pointer)
		}
		if strings.Contains(err.Error(), tc.secret) {
			t.Fatalf("%s: the error shows the sensitive value: %v", tc.data, err)
		}
	}
	err = s.Validate([]byte(`{"locale":"TRtr"}`))
	if err == nil || !strings.Contains(err.Error(), "TRtr") {
		t.Fatalf("a violation of a field that is not sensitive keeps the validator's text: %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	for name, tc := range map[string]struct{ urn, doc string }{
		"empty URN":         {"", `{}`},
		"not JSON":          {"urn:x", `{"type":`},
		"bad keyword value": {"urn:x", `{"type":5}`},
		"RE2 cannot do it":  {"urn:x", `{"pattern":"^(?!x)"}`},
		"unresolvable $ref": {"urn:x", `{"$ref":"#/definitions/missing"}`},
	} {
		if _, err := schema.Compile(tc.urn, []byte(tc.doc)); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
	if _, err := schema.Compile("urn:x", []byte(`{}`), schema.WithDefaultDraft(schema.Draft(42))); err == nil {
		t.Error("an unknown draft compiled")
	}
}

func TestDefaultDraft(t *testing.T) {
	// Beside $ref, draft-07 ignores minLength and 2020-12 applies it.
	doc := []byte(`{"properties":{"a":{"$ref":"#/$defs/s","minLength":5}},"$defs":{"s":{"type":"string"}}}`)
	data := []byte(`{"a":"ab"}`)
	d7, err := schema.Compile("urn:x", doc)
	if err != nil {
		t.Fatal(err)
	}
	d2020, err := schema.Compile("urn:x", doc, schema.WithDefaultDraft(schema.Draft2020))
	if err != nil {
		t.Fatal(err)
	}
	if err := d7.Validate(data); err != nil {
		t.Errorf("draft-07 (the default): %v", err)
	}
	if err := d2020.Validate(data); err == nil {
		t.Error("2020-12: minLength beside $ref was not applied")
	}
}

func TestValidateNotJSON(t *testing.T) {
	s, err := schema.Compile("urn:x", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{``, `{"a":`, `{} {}`} {
		err := s.Validate([]byte(data))
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "schema: urn:x: data: not JSON") {
			t.Errorf("%q: %v", data, err)
		}
	}
}

// TestCompileRefs: a schema given in code reaches a file by absolute file: URL, and
// never the network.
func TestCompileRefs(t *testing.T) {
	common, err := filepath.Abs(filepath.Join(exampleRegistry, "schemas", "common.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"properties":{"total":{"$ref":"file://` + filepath.ToSlash(common) + `#/definitions/money"}}}`
	s, err := schema.Compile("urn:x", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var ve *schema.ValidationError
	if err := s.Validate([]byte(`{"total":{"amount_cents":1,"currency":"eur"}}`)); !errors.As(err, &ve) || ve.Pointer != "/total/currency" {
		t.Fatalf("got %v", err)
	}
	for _, ref := range []string{"https://json-schema.example/money.json", "common.json"} {
		if _, err := schema.Compile("urn:x", []byte(`{"$ref":"`+ref+`"}`)); err == nil {
			t.Errorf("$ref %s compiled", ref)
		}
	}
}
