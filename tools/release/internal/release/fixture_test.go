package release

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/gitx"
)

// The fixture is a small repository laid out as BabelQueue's: a root module with a
// Version constant, a broker module in transport/echo, a command in cmd/tool that
// prints the version, a development-only module, go.work, a README with a quick start
// and the Modules tables, and a CHANGELOG. Its modules need nothing from outside, so
// the tests run with no public proxy ("off").
var fixtureFiles = map[string]string{
	"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./cmd/tool\n\t./devonly\n\t./transport/echo\n)\n",
	"go.mod":  "module example.com/bqfix\n\ngo 1.24.0\n",
	"bqfix.go": `// Package bqfix is the fixture's root package.
package bqfix

// Version is the version of this SDK.
const Version = "0.0.0"

// Hello greets.
func Hello() string { return "hello" }
`,
	"internal/secret/secret.go": "// Package secret is internal: no API.\npackage secret\n\n// Key is not API.\nconst Key = 1\n",
	"transport/echo/go.mod": `module example.com/bqfix/transport/echo

go 1.26.0

require example.com/bqfix v0.0.0-00010101000000-000000000000

replace example.com/bqfix => ../..
`,
	"transport/echo/echo.go": `// Package echo is the fixture's broker.
package echo

import "example.com/bqfix"

// Echo echoes.
func Echo() string { return "echo " + bqfix.Version }
`,
	"cmd/tool/go.mod": `module example.com/bqfix/cmd/tool

go 1.26.0

require (
	example.com/bqfix v0.0.0-00010101000000-000000000000
	example.com/bqfix/transport/echo v0.0.0-00010101000000-000000000000
)

replace (
	example.com/bqfix => ../..
	example.com/bqfix/transport/echo => ../../transport/echo
)
`,
	"cmd/tool/main.go": `// Command tool prints the fixture's version.
package main

import (
	"fmt"

	"example.com/bqfix"
	"example.com/bqfix/transport/echo"
)

func main() { fmt.Println("tool", bqfix.Version, echo.Echo()) }
`,
	"devonly/go.mod": `// babelqueue:unpublished: development only.
module example.com/bqfix/devonly

go 1.26.0

require example.com/bqfix v0.0.0-00010101000000-000000000000

replace example.com/bqfix => ..
`,
	"devonly/dev.go": "package devonly\n\nimport _ \"example.com/bqfix\"\n",
	"README.md": "# fixture\n\n## Quick start\n\n```go\npackage main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/bqfix\"\n\t\"example.com/bqfix/transport/echo\"\n)\n\nfunc main() { fmt.Println(bqfix.Version, echo.Echo()) }\n```\n\n" +
		"## Modules\n\n| module (directory) | requires | `go` line |\n|---|---|---|\n" +
		"| `example.com/bqfix` (`/`) | nothing | 1.24 |\n| `…/transport/echo` | the root | 1.26 |\n| `…/cmd/tool` | both | 1.26 |\n\n" +
		"| program imports the root and | modules (`go list -m all`) |\n|---|---|\n| nothing else | 2 |\n| `transport/echo` | 3 |\n\n## Other\n",
	"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n## [0.1.0]\n\n### Added\n\n- Hello.\n",
}

func newFixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	for name, content := range fixtureFiles {
		write(t, filepath.Join(dir, name), content)
	}
	git(t, dir, "init", "--quiet")
	commitAll(t, dir, "fixture")
	return dir
}

func write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitx.Git(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func commitAll(t *testing.T, dir, msg string) {
	t.Helper()
	git(t, dir, "add", "--all")
	git(t, dir, "commit", "--quiet", "-m", msg)
}

// options are the fixture's: no public proxy, a scratch directory per test.
func options(t *testing.T, repo, version string, log *bytes.Buffer) Options {
	return Options{Repo: repo, Version: version, PublicProxy: "off", Scratch: t.TempDir(), Log: log}
}

func releaseFixture(t *testing.T, repo, version string) string {
	t.Helper()
	var log bytes.Buffer
	if err := Release(context.Background(), ReleaseOptions{Options: options(t, repo, version, &log)}); err != nil {
		t.Fatalf("release %s: %v\n%s", version, err, log.String())
	}
	return log.String()
}

func tagFixture(t *testing.T, repo, version string) string {
	t.Helper()
	var log bytes.Buffer
	if err := Release(context.Background(), ReleaseOptions{Options: options(t, repo, version, &log), Push: true}); err != nil {
		t.Fatalf("release %s -dry-run=false: %v\n%s", version, err, log.String())
	}
	return log.String()
}
