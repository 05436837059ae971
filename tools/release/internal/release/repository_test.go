package release

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/gitx"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/workspace"
)

// The API check on BabelQueue itself: a scratch copy of this repository's work tree
// is released as v0.3.0 (its root module, tagged in the copy), then an exported
// function is removed; the check of the next patch release fails and names it, the
// next minor release passes. The root module needs nothing from outside, so no proxy
// is used.
func TestAPICheckFailsOnAnIncompatibleChangeToTheRepository(t *testing.T) {
	t.Parallel()
	top, err := gitx.Git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	if err := gitx.CopyWorkTree(strings.TrimSpace(top), copyDir); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Load(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(copyDir, "releaseprobe.go")
	write(t, probe, "package babelqueue\n\n// ReleaseProbe exists in the scratch copy's v0.3.0 only.\nfunc ReleaseProbe() string { return \"probe\" }\n")
	commitAll(t, copyDir, "a function the next version removes")

	ctx := context.Background()
	only := []string{ws.RootModule().Path}
	var log bytes.Buffer
	o := Options{Repo: copyDir, Version: "v0.3.0", PublicProxy: "off", Scratch: t.TempDir(), Log: &log, Only: only}
	if err := Release(ctx, ReleaseOptions{Options: o, Push: true, SkipChecks: true}); err != nil {
		t.Fatalf("release v0.3.0 of the copy: %v\n%s", err, log.String())
	}
	if tags := git(t, copyDir, "tag", "--list"); strings.TrimSpace(tags) != "v0.3.0" {
		t.Fatalf("tags in the copy: %q", tags)
	}

	git(t, copyDir, "rm", "--quiet", "releaseprobe.go")
	commitAll(t, copyDir, "an incompatible change: ReleaseProbe removed")
	compare := func(version string) *bytes.Buffer {
		var log bytes.Buffer
		b, err := Prepare(ctx, Options{Repo: copyDir, Version: version, PublicProxy: "off", Scratch: t.TempDir(), Log: &log, Only: only})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Apply(ctx); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		results, err := b.CompareAPI(ctx)
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		if len(results) != 1 || results[0].Base != "v0.3.0" {
			t.Fatalf("results = %+v\n%s", results, log.String())
		}
		if ok, want := results[0].OK(), version != "v0.3.1"; ok != want {
			t.Errorf("%s: OK() = %v, want %v\n%s", version, ok, want, log.String())
		}
		return &log
	}
	if log := compare("v0.3.1").String(); !strings.Contains(log, "- ReleaseProbe: removed") ||
		!strings.Contains(log, "github.com/babelqueue-go/babelqueue v0.3.0 -> v0.3.1: 1 incompatible, 0 compatible changes: FAIL") {
		t.Errorf("the report of v0.3.1:\n%s", log)
	} else {
		t.Logf("the check of v0.3.1 after removing ReleaseProbe:\n%s", log[strings.Index(log, "API check"):])
	}
	compare("v0.4.0")
}
