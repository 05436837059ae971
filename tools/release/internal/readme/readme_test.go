package readme

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/workspace"
)

// The repository's own README: the parts the install check reads are where it looks.
func TestTheRepositorysREADME(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := QuickStart(md)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", qs, parser.ImportsOnly)
	if err != nil || f.Name.Name != "main" {
		t.Fatalf("the quick start is not a main package: %v\n%s", err, qs)
	}
	lines, err := GoLines(md, "github.com/babelqueue-go/babelqueue")
	if err != nil {
		t.Fatal(err)
	}
	if lines["github.com/babelqueue-go/babelqueue"] == "" || lines["github.com/babelqueue-go/babelqueue/transport/redis"] == "" {
		t.Errorf("GoLines = %v", lines)
	}
	counts, err := Counts(md)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := counts["none"]; !ok || counts["redis"] == 0 || counts["pulsar"] == 0 {
		t.Errorf("Counts = %v", counts)
	}
}

const md = "# x\n\n## Quick start\n\n```sh\n## not a heading\n```\n\n```go\npackage main\n\nfunc main() {}\n```\n\n" +
	"## Modules\n\n" +
	"| module (directory) | requires | `go` line |\n|---|---|---|\n" +
	"| `m.test/r` (`/`): the runtime | nothing | 1.24 |\n| `…/transport/a` | a client | 1.26 |\n\n" +
	"| program imports the root and | modules (`go list -m all`) | before |\n|---|---|---|\n" +
	"| nothing else | 2 | 80 |\n| `transport/a` | **7** | 90 |\n\n" +
	"## Later\n\n| module (directory) | `go` line |\n|---|---|\n| `…/elsewhere` | 1.1 |\n"

func TestTables(t *testing.T) {
	qs, err := QuickStart([]byte(md))
	if err != nil || string(qs) != "package main\n\nfunc main() {}\n" {
		t.Errorf("QuickStart = %q, %v", qs, err)
	}
	lines, err := GoLines([]byte(md), "m.test/r")
	if err != nil || len(lines) != 2 || lines["m.test/r"] != "1.24" || lines["m.test/r/transport/a"] != "1.26" {
		t.Errorf("GoLines = %v, %v (the table after the section is not read)", lines, err)
	}
	counts, err := Counts([]byte(md))
	if err != nil || len(counts) != 2 || counts["none"] != 2 || counts["a"] != 7 {
		t.Errorf("Counts = %v, %v", counts, err)
	}
}

func TestCheck(t *testing.T) {
	ws := &workspace.Workspace{Modules: []*workspace.Module{
		{Dir: ".", Path: "m.test/r", Go: "1.24.0", Published: true},
		{Dir: "transport/a", Path: "m.test/r/transport/a", Go: "1.26.0", Published: true},
	}}
	if err := Check([]byte(md), ws, map[string]int{"none": 2, "a": 7}); err != nil {
		t.Errorf("Check of a matching README: %v", err)
	}
	ws.Modules[1].Go = "1.25"
	ws.Modules = append(ws.Modules, &workspace.Module{Dir: "transport/b", Path: "m.test/r/transport/b", Go: "1.26", Published: true})
	err := Check([]byte(md), ws, map[string]int{"none": 3, "a": 7, "b": 5})
	for _, want := range []string{
		"m.test/r/transport/a: go line 1.26, but its go.mod says go 1.25",
		"the published module m.test/r/transport/b (transport/b) has no row",
		"b: no row, measured 5",
		"none: README 2, measured 3",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v\nwant it to say %q", err, want)
		}
	}
}
