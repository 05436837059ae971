package release

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkAt runs the check of the fixture's work tree at version and returns its log
// and error.
func checkAt(t *testing.T, repo, version string) (string, error) {
	t.Helper()
	var log bytes.Buffer
	err := Check(context.Background(), options(t, repo, version, &log))
	if err != nil && !errors.Is(err, ErrCheck) {
		t.Fatalf("check %s: the comparison itself failed: %v\n%s", version, err, log.String())
	}
	return log.String(), err
}

func TestAPICheckAgainstTheLastRelease(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	tagFixture(t, repo, "v0.1.0")
	root := filepath.Join(repo, "bqfix.go")
	original := fixtureFiles["bqfix.go"]

	cases := []struct {
		name    string
		src     string // bqfix.go in the work tree
		version string
		fail    string // "" passes; else the report line the failure shows
	}{
		{"removal in a patch release", strings.Replace(original, "// Hello greets.\nfunc Hello() string { return \"hello\" }\n", "", 1), "v0.1.1", "- Hello: removed"},
		{"removal in a minor release of v0", strings.Replace(original, "// Hello greets.\nfunc Hello() string { return \"hello\" }\n", "", 1), "v0.2.0", ""},
		{"changed signature in a patch release", strings.Replace(original, "func Hello() string", "func Hello(name string) string", 1), "v0.1.1", "- Hello: changed from func() string to func(string) string"},
		{"addition in a patch release", original + "\n// Extra is new.\nfunc Extra() {}\n", "v0.1.1", "- Extra: added"},
		{"addition in a minor release", original + "\n// Extra is new.\nfunc Extra() {}\n", "v0.2.0", ""},
		{"no API change in a patch release", strings.Replace(original, `return "hello"`, `return "hi"`, 1), "v0.1.1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			write(t, root, c.src)
			defer write(t, root, original)
			log, err := checkAt(t, repo, c.version)
			if !strings.Contains(log, "API check against the last release") || !strings.Contains(log, "example.com/bqfix v0.1.0 -> "+c.version) {
				t.Fatalf("no API comparison with v0.1.0 in the log:\n%s", log)
			}
			if c.fail == "" {
				if err != nil {
					t.Fatalf("err = %v\n%s", err, log)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "example.com/bqfix: the API changes since v0.1.0 need a minor version, not "+c.version) {
				t.Fatalf("err = %v, want the minor version asked for\n%s", err, log)
			}
			if !strings.Contains(log, c.fail) || !strings.Contains(log, "FAIL: these changes need a minor version, "+c.version+" is a patch release") {
				t.Errorf("the report does not show %q:\n%s", c.fail, log)
			}
		})
	}

	// Internal packages are no API: removing one's constant needs no new version.
	secret := filepath.Join(repo, "internal/secret/secret.go")
	write(t, secret, "// Package secret is internal: no API.\npackage secret\n")
	if log, err := checkAt(t, repo, "v0.1.1"); err != nil {
		t.Errorf("an internal package's change failed the check: %v\n%s", err, log)
	}
	write(t, secret, fixtureFiles["internal/secret/secret.go"])

	// From v1 on, an incompatible change needs a new major version.
	write(t, filepath.Join(repo, "CHANGELOG.md"), fixtureFiles["CHANGELOG.md"]+"\n## [1.0.0]\n")
	commitAll(t, repo, "1.0.0")
	tagFixture(t, repo, "v1.0.0")
	write(t, root, strings.Replace(original, "func Hello() string", "func Hello(name string) string", 1))
	log, err := checkAt(t, repo, "v1.1.0")
	if err == nil || !strings.Contains(err.Error(), "need a major version, not v1.1.0") || !strings.Contains(log, "module path ending in /v2") {
		t.Errorf("an incompatible change in v1.1.0: err = %v\n%s", err, log)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatal(err)
	}
}
