package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const exampleRegistry = "../../schema/testdata/registry"

func example(name string) string { return filepath.Join(exampleRegistry, "messages", name) }

func TestSchemaCheck(t *testing.T) {
	unknown := filepath.Join(t.TempDir(), "unknown.json")
	if err := os.WriteFile(unknown, []byte(`{"job":"urn:babel:no:schema","trace_id":"t","data":{},"meta":{"id":"i","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		code int
		out  []string
	}{
		"registry only": {[]string{"-registry", exampleRegistry}, 0, []string{"3 schema(s) load and compile"}},
		"valid envelopes": {[]string{"--registry", exampleRegistry, example("order-created.json"), example("user-registered.json"), example("invoice-issued.json")}, 0,
			[]string{"ok       " + example("order-created.json") + ": urn:babel:orders:created", "ok       " + example("invoice-issued.json")}},
		"invalid envelope": {[]string{"-registry", exampleRegistry, example("order-created.json"), example("order-created-invalid.json")}, 1,
			[]string{"invalid  " + example("order-created-invalid.json") + `: schema: urn:babel:orders:created: data at /order_id violates "minimum"`}},
		"data file with -urn": {[]string{"-registry", exampleRegistry, "-urn", "urn:babel:invoices:issued", example("invoice-data-invalid.json")}, 1,
			[]string{`data at /total/currency violates "pattern"`}},
		"data file without -urn": {[]string{"-registry", exampleRegistry, example("invoice-data-invalid.json")}, 2,
			[]string{"error    " + example("invoice-data-invalid.json") + ": not an envelope"}},
		"URN without a schema": {[]string{"-registry", exampleRegistry, unknown}, 0, []string{"skipped", "not validated"}},
		"missing file":         {[]string{"-registry", exampleRegistry, "no-such-file.json"}, 2, []string{"error    no-such-file.json"}},
		"no registry flag":     {[]string{example("order-created.json")}, 2, nil},
		"broken registry":      {[]string{"-registry", t.TempDir()}, 2, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"schema", "check"}, tc.args...), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errb.String())
			}
			for _, want := range tc.out {
				if !strings.Contains(out.String(), want) {
					t.Errorf("stdout does not say %q:\n%s", want, out.String())
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"schema", "lint"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "schema check -registry DIR") {
		t.Fatalf("unknown subcommand: exit %d\n%s", code, errb.String())
	}
}

// TestSchemaCheckWarnsWhereSDKsDiffer: the check warns about the constructs the Python
// SDK 1.24.0 evaluates differently (schema/PARITY.md), lists the keywords it does not
// check with -notes, and fails with -strict.
func TestSchemaCheckWarnsWhereSDKsDiffer(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("registry.json", `{"schemas":[{"urn":"urn:babel:mixed:fleet","schema":"fleet.json"}]}`)
	write("fleet.json", `{"type":"object","properties":{
		"qty":{"type":"number","enum":[1,2.5]},
		"extra":true,
		"a.b":{"type":"string","x-gdpr-sensitive":true},
		"code":{"type":"string","pattern":"^[A-Z]+$"},
		"weight":{"type":"number"}},
		"additionalProperties":false}`)
	huge := write("huge.json", `{"weight":1e400}`)
	for name, tc := range map[string]struct {
		args    []string
		code    int
		out     []string
		without []string
	}{
		"registry": {[]string{"-registry", dir}, 0, []string{
			"warning  urn:babel:mixed:fleet #/properties/a.b: the property name \"a.b\" holds a \".\"",
			"warning  urn:babel:mixed:fleet #/properties/extra: the Python SDK 1.24.0 does not read a boolean subschema",
			"warning  urn:babel:mixed:fleet #/properties/qty/enum: holds 1, an integer-valued number",
			"1 schema(s) load and compile; 3 warning(s)"}, []string{"note "}},
		"notes":  {[]string{"-registry", dir, "-notes"}, 0, []string{"note     urn:babel:mixed:fleet #/properties/code/pattern: the Python SDK 1.24.0 does not check \"pattern\""}, nil},
		"strict": {[]string{"-registry", dir, "-strict"}, 1, []string{"3 warning(s)"}, nil},
		"data beyond float64": {[]string{"-registry", dir, "-urn", "urn:babel:mixed:fleet", huge}, 0, []string{
			"warning  " + huge + " data at /weight: 1e400 is beyond the float64 range", "ok       " + huge}, nil},
		"example registry has no warning": {[]string{"-registry", exampleRegistry, "-strict", "-notes"}, 0, []string{
			"0 warning(s)", "note     urn:babel:invoices:issued #/properties/invoice_id/format"}, []string{"warning  "}},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"schema", "check"}, tc.args...), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errb.String())
			}
			for _, want := range tc.out {
				if !strings.Contains(out.String(), want) {
					t.Errorf("stdout does not say %q:\n%s", want, out.String())
				}
			}
			for _, not := range tc.without {
				if strings.Contains(out.String(), not) {
					t.Errorf("stdout says %q:\n%s", not, out.String())
				}
			}
		})
	}
}
