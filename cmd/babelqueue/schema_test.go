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
