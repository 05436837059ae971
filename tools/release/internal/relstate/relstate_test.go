package relstate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const devGoMod = `module m.test/r/cmd/x

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	m.test/r v0.0.0-00010101000000-000000000000
	m.test/r/transport/a v0.0.0-00010101000000-000000000000 // indirect
)

replace (
	m.test/r => ../..
	m.test/r/transport/a => ../../transport/a
)
`

var siblings = map[string]bool{"m.test/r": true, "m.test/r/transport/a": true, "m.test/r/cmd/x": true}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSetRequirements(t *testing.T) {
	p := writeFile(t, t.TempDir(), "go.mod", devGoMod)
	if err := SetRequirements(p, siblings, "v0.3.0"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	got := string(data)
	for _, want := range []string{"m.test/r v0.3.0\n", "m.test/r/transport/a v0.3.0 // indirect\n", "github.com/redis/go-redis/v9 v9.23.0\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "replace") || strings.Contains(got, "v0.0.0-") {
		t.Errorf("go.mod still has development lines:\n%s", got)
	}
	if err := CheckPublishable("go.mod", data, siblings, "v0.3.0"); err != nil {
		t.Errorf("CheckPublishable after SetRequirements: %v", err)
	}
}

func TestSetRequirementsRefusesOtherReplaces(t *testing.T) {
	for name, extra := range map[string]string{
		"replace": "\nreplace github.com/redis/go-redis/v9 => ../fork\n",
		"exclude": "\nexclude github.com/redis/go-redis/v9 v9.0.0\n",
	} {
		p := writeFile(t, t.TempDir(), "go.mod", devGoMod+extra)
		if err := SetRequirements(p, siblings, "v0.3.0"); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s of a third-party module: err = %v", name, err)
		}
	}
}

func TestCheckPublishable(t *testing.T) {
	err := CheckPublishable("x/go.mod", []byte(devGoMod), siblings, "v0.3.0")
	for _, want := range []string{
		"replace m.test/r => ../..",
		"requires m.test/r at v0.0.0-00010101000000-000000000000, not the released v0.3.0",
		"requires m.test/r/transport/a at v0.0.0-00010101000000-000000000000",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
	stale := "module m.test/r/a\n\ngo 1.26\n\nrequire m.test/r v0.2.0\n"
	if err := CheckPublishable("a/go.mod", []byte(stale), siblings, "v0.3.0"); err == nil {
		t.Error("a sibling at the previous release: no error")
	}
}

func TestSetVersionConst(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a_test.go", "package r\n\nconst Version = \"test\"\n")
	writeFile(t, dir, "doc.go", "// Package r.\npackage r\n")
	src := "package r\n\nimport \"fmt\"\n\n// Version is the version of this SDK.\nconst Version = \"0.2.0\" // set by the release\n\nvar _ = fmt.Sprint\n"
	p := writeFile(t, dir, "r.go", src)
	got, err := SetVersionConst(dir, "v0.3.0")
	if err != nil || got != p {
		t.Fatalf("SetVersionConst = %q, %v", got, err)
	}
	data, _ := os.ReadFile(p)
	if want := strings.Replace(src, `"0.2.0"`, `"0.3.0"`, 1); string(data) != want {
		t.Errorf("r.go:\n%s\nwant:\n%s", data, want)
	}
	if _, err := SetVersionConst(t.TempDir(), "v0.3.0"); err == nil {
		t.Error("no Version constant: no error")
	}
}

const changelog = `# Changelog

## [Unreleased]

## [0.4.0-rc.1]

## [0.3.0] - Unreleased

### Added

## [0.2.0] - 2026-11-01
`

func TestChangelog(t *testing.T) {
	if got := strings.Join(ChangelogVersions([]byte(changelog)), " "); got != "v0.4.0-rc.1 v0.3.0 v0.2.0" {
		t.Errorf("ChangelogVersions = %q", got)
	}
	dir := t.TempDir()
	p := writeFile(t, dir, "CHANGELOG.md", changelog)
	day := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	if err := DateChangelog(p, "v0.3.0", day); err != nil {
		t.Fatal(err)
	}
	if err := DateChangelog(p, "v0.2.0", day); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	if want := strings.Replace(changelog, "## [0.3.0] - Unreleased", "## [0.3.0] - 2026-12-04", 1); string(data) != want {
		t.Errorf("dated CHANGELOG:\n%s", data)
	}
	if err := DateChangelog(p, "v0.5.0", day); err == nil {
		t.Error("no section: no error")
	}
	if err := CheckChangelog(dir, "v0.5.0"); !errors.Is(err, ErrNoSection) || !strings.Contains(err.Error(), `"## [0.5.0]"`) {
		t.Errorf("CheckChangelog of a missing section: %v", err)
	}
	if err := CheckChangelog(dir, "v0.3.0"); err != nil {
		t.Errorf("CheckChangelog: %v", err)
	}
}

func TestNextVersion(t *testing.T) {
	for _, c := range []struct{ changelog, last, want string }{
		{changelog, "", "v0.4.0-rc.1"},
		{changelog, "v0.3.0", "v0.4.0-rc.1"},
		{changelog, "v0.4.0", "v0.4.1"},
		{"# Changelog\n\n## [Unreleased]\n", "v0.3.0", "v0.3.1"},
		{"", "", "v0.1.0"},
		{"## [0.3.0]\n", "", "v0.3.0"},
	} {
		if got := NextVersion([]byte(c.changelog), c.last); got != c.want {
			t.Errorf("NextVersion(last %q) = %q, want %q", c.last, got, c.want)
		}
	}
}

func TestCheckNewVersion(t *testing.T) {
	for _, c := range []struct {
		v, last string
		ok      bool
	}{
		{"v0.3.0", "", true},
		{"v0.3.1", "v0.3.0", true},
		{"v0.4.0-rc.1", "v0.3.0", true},
		{"v1.0.0", "v0.9.9", true},
		{"v0.3.0", "v0.3.0", false},
		{"v0.2.9", "v0.3.0", false},
		{"v0.3.0-rc.1", "v0.3.0", false},
		{"v0.3", "", false},
		{"0.3.0", "", false},
		{"v0.3.0+meta", "", false},
		{"v2.0.0", "v1.5.0", false},
	} {
		if err := CheckNewVersion(c.v, c.last); (err == nil) != c.ok {
			t.Errorf("CheckNewVersion(%q, last %q) = %v, want ok %v", c.v, c.last, err, c.ok)
		}
	}
}
