package schema_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/schema"
)

const exampleRegistry = "testdata/registry"

func loadExamples(t *testing.T) *schema.Registry {
	t.Helper()
	reg, err := schema.LoadRegistry(exampleRegistry)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestRegistryExamples validates the example messages of the example registry (a
// babelqueue-registry layout: registry.json, schemas/, messages/): the valid ones pass,
// the invalid ones name their violation.
func TestRegistryExamples(t *testing.T) {
	reg := loadExamples(t)
	if got, want := reg.URNs(), []string{"urn:babel:invoices:issued", "urn:babel:orders:created", "urn:babel:users:registered"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("URNs %v, want %v", got, want)
	}
	if e, ok := reg.Entry("urn:babel:orders:created"); !ok || e.Owner != "orders" || e.Status != "active" || e.Schema != "schemas/orders-created.json" {
		t.Fatalf("entry %+v", e)
	}
	for file, want := range map[string]string{
		"order-created.json":         "",
		"user-registered.json":       "",
		"invoice-issued.json":        "",
		"order-created-invalid.json": "/order_id minimum",
	} {
		body, err := os.ReadFile(filepath.Join(exampleRegistry, "messages", file))
		if err != nil {
			t.Fatal(err)
		}
		env, err := envelope.Decode(body)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		err = reg.Schema(env.Job).Validate(env.Data)
		var ve *schema.ValidationError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", file, err)
		case want != "" && !errors.As(err, &ve):
			t.Errorf("%s: got %v, want a violation", file, err)
		case want != "" && ve.Pointer+" "+ve.Keyword != want:
			t.Errorf("%s: violation %q %q, want %s", file, ve.Pointer, ve.Keyword, want)
		}
	}
	// A $ref into another file of the registry (common.json) is followed.
	data, err := os.ReadFile(filepath.Join(exampleRegistry, "messages", "invoice-data-invalid.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ve *schema.ValidationError
	if err := reg.Schema("urn:babel:invoices:issued").Validate(data); !errors.As(err, &ve) || ve.Pointer != "/total/currency" || ve.Keyword != "pattern" {
		t.Fatalf("got %v, want the pattern of common.json#/definitions/money at /total/currency", err)
	}
	if reg.Schema("urn:babel:unknown") != nil {
		t.Fatal("a URN outside the registry has a schema")
	}
}

// TestLoadRegistryFile: the manifest path itself works as well as its directory.
func TestLoadRegistryFile(t *testing.T) {
	reg, err := schema.LoadRegistry(filepath.Join(exampleRegistry, "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	if reg.Schema("urn:babel:orders:created") == nil {
		t.Fatal("no schema")
	}
}

// TestLoadRegistryErrors: every way a registry can be broken is an error at load time
// that matches ErrRegistry and names what is wrong.
func TestLoadRegistryErrors(t *testing.T) {
	good := `{"type":"object"}`
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"no manifest":        {map[string]string{}, "registry.json"},
		"manifest not JSON":  {map[string]string{"registry.json": `{"schemas": [`}, "registry.json"},
		"trailing garbage":   {map[string]string{"registry.json": `{"schemas": []} x`}, "registry.json"},
		"no schemas list":    {map[string]string{"registry.json": `{"urns": []}`}, `no "schemas" list`},
		"schemas not a list": {map[string]string{"registry.json": `{"schemas": {}}`}, "registry.json"},
		"entry without urn":  {map[string]string{"registry.json": `{"schemas": [{"schema": "a.json"}]}`, "a.json": good}, "schemas[0]"},
		"entry without file": {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a"}]}`}, "schemas[0]"},
		"urn listed twice": {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "a.json"}, {"urn": "urn:a", "schema": "a.json"}]}`,
			"a.json": good}, "urn:a is listed twice"},
		"missing file":      {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "schemas/a.json"}]}`}, "schemas/a.json"},
		"file not JSON":     {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "a.json"}]}`, "a.json": `{"type":`}, "not JSON"},
		"invalid schema":    {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "a.json"}]}`, "a.json": `{"type": "objekt"}`}, "a.json"},
		"pattern RE2 lacks": {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "a.json"}]}`, "a.json": `{"pattern": "(?<=a)b"}`}, "a.json"},
		"$ref to a missing file": {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "a.json"}]}`,
			"a.json": `{"$ref": "common.json#/definitions/x"}`}, "common.json"},
		"$ref over http": {map[string]string{"registry.json": `{"schemas": [{"urn": "urn:a", "schema": "a.json"}]}`,
			"a.json": `{"$ref": "http://example.invalid/x.json"}`}, "http://example.invalid/x.json"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, body := range tc.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := schema.LoadRegistry(dir)
			if !errors.Is(err, schema.ErrRegistry) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ErrRegistry naming %q", err, tc.want)
			}
		})
	}
}

// TestRegistrySharedFile: two URNs may name one schema file.
func TestRegistrySharedFile(t *testing.T) {
	dir := t.TempDir()
	manifest := `{"schemas": [{"urn": "urn:a", "schema": "s.json"}, {"urn": "urn:b", "schema": "./s.json"}]}`
	if err := os.WriteFile(filepath.Join(dir, "registry.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s.json"), []byte(`{"required":["x"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := schema.LoadRegistry(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, urn := range []string{"urn:a", "urn:b"} {
		if err := reg.Schema(urn).Validate([]byte(`{}`)); !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), urn) {
			t.Errorf("%s: %v", urn, err)
		}
	}
}

func TestNewRegistry(t *testing.T) {
	a, err := schema.Compile("urn:a", []byte(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.NewRegistry(a, a); !errors.Is(err, schema.ErrRegistry) {
		t.Fatalf("two schemas for one URN: %v", err)
	}
	if _, err := schema.NewRegistry(a, nil); !errors.Is(err, schema.ErrRegistry) {
		t.Fatalf("a nil schema: %v", err)
	}
	reg, err := schema.NewRegistry(a)
	if err != nil || reg.Schema("urn:a") != a || reg.Schema("urn:b") != nil {
		t.Fatalf("%v", err)
	}
	var none *schema.Registry
	if none.Schema("urn:a") != nil || none.URNs() != nil {
		t.Fatal("a nil registry has schemas")
	}
}

// TestSensitivePaths: every path form of SPEC.md §8.6, read from the example registry.
func TestSensitivePaths(t *testing.T) {
	paths, err := loadExamples(t).Schema("urn:babel:users:registered").SensitivePaths()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range paths {
		got = append(got, p.Path+"="+p.Category)
	}
	want := []string{"addresses[].line=", "billing=payment", "email=email", "phone=", "profile.full_name=", "profile.national_id=national_id"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("paths %v, want %v", got, want)
	}
	if !reflect.DeepEqual(paths[0].Steps, []schema.Step{{Property: "addresses", Items: 1}, {Property: "line"}}) {
		t.Fatalf("steps %+v", paths[0].Steps)
	}
}

func TestSensitivePathForms(t *testing.T) {
	for name, tc := range map[string]struct {
		doc   string
		paths []string
		lost  bool
	}{
		"false and empty mark nothing": {`{"properties":{"a":{"x-gdpr-sensitive":false},"b":{"x-gdpr-sensitive":""},"c":{"x-gdpr-sensitive":1}}}`, nil, false},
		"inside a marked object":       {`{"properties":{"p":{"x-gdpr-sensitive":true,"properties":{"q":{"x-gdpr-sensitive":true}}}}}`, []string{"p"}, false},
		"array elements":               {`{"properties":{"tags":{"type":"array","items":{"x-gdpr-sensitive":true}}}}`, []string{"tags[]"}, false},
		"array of arrays":              {`{"properties":{"m":{"items":{"items":{"properties":{"v":{"x-gdpr-sensitive":true}}}}}}}`, []string{"m[][].v"}, false},
		"a property named like it":     {`{"properties":{"x-gdpr-sensitive":{"type":"string"}}}`, nil, false},
		"inside enum data":             {`{"properties":{"a":{"enum":[{"x-gdpr-sensitive":true}]}}}`, nil, false},
		"root":                         {`{"x-gdpr-sensitive":true,"properties":{"a":{}}}`, nil, true},
		"under $defs":                  {`{"properties":{"a":{"$ref":"#/$defs/e"}},"$defs":{"e":{"x-gdpr-sensitive":true}}}`, nil, true},
		"under oneOf":                  {`{"properties":{"a":{"oneOf":[{"x-gdpr-sensitive":true}]}}}`, nil, true},
		"under additionalProperties":   {`{"additionalProperties":{"x-gdpr-sensitive":true}}`, nil, true},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := schema.Compile("urn:x", []byte(tc.doc), schema.WithDefaultDraft(schema.Draft2020))
			if err != nil {
				t.Fatal(err)
			}
			paths, err := s.SensitivePaths()
			if tc.lost != errors.Is(err, schema.ErrMarkNotProtectable) {
				t.Fatalf("err %v, want a lost mark: %v", err, tc.lost)
			}
			var got []string
			for _, p := range paths {
				got = append(got, p.Path)
			}
			if !reflect.DeepEqual(got, tc.paths) {
				t.Fatalf("paths %v, want %v", got, tc.paths)
			}
		})
	}
}

// TestExamplesAreEnvelopes keeps the example messages honest: each is an envelope the
// SDK accepts.
func TestExamplesAreEnvelopes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(exampleRegistry, "messages", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(body, &probe); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, isEnvelope := probe["job"]; !isEnvelope {
			continue
		}
		env, err := envelope.Decode(body)
		if err != nil || env.Accepts() != nil {
			t.Errorf("%s: %v %v", f, err, env.Accepts())
		}
	}
}
