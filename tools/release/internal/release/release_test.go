package release

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/relstate"
)

func TestReleaseDryRunPrintsModulesTagsAndChangesAndTagsNothing(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	head := git(t, repo, "rev-parse", "HEAD")
	log := releaseFixture(t, repo, "v0.1.0")

	// Every published module, its tag, in dependency order; the unpublished one named.
	var order []string
	for _, tag := range []string{"v0.1.0", "transport/echo/v0.1.0", "cmd/tool/v0.1.0"} {
		i := strings.Index(log, "\n  "+tag+" ")
		if i < 0 {
			t.Fatalf("the dry run does not list the module line of %s:\n%s", tag, log)
		}
		order = append(order, tag)
		if len(order) > 1 && strings.Index(log, "\n  "+order[len(order)-2]+" ") > i {
			t.Errorf("%s is listed before %s, which it requires:\n%s", tag, order[len(order)-2], log)
		}
	}
	for _, want := range []string{
		"DRY RUN",
		"not released (go.mod marked babelqueue:unpublished): devonly",
		`-const Version = "0.0.0"`, `+const Version = "0.1.0"`,
		"-replace example.com/bqfix => ../..", "+require example.com/bqfix v0.1.0",
		"+## [0.1.0] - 20",
		"tool 0.1.0 echo 0.1.0", // the command, installed by version, ran
		"dry run: nothing tagged",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the dry run does not print %q:\n%s", want, log)
		}
	}
	if tags := git(t, repo, "tag", "--list"); tags != "" {
		t.Errorf("a dry run tagged: %q", tags)
	}
	if now := git(t, repo, "rev-parse", "HEAD"); now != head {
		t.Errorf("a dry run moved HEAD from %s to %s", head, now)
	}
	if dirty := git(t, repo, "status", "--porcelain"); dirty != "" {
		t.Errorf("a dry run changed the work tree:\n%s", dirty)
	}
}

func TestReleaseTagsTheReleaseCommitAndLeavesTheBranch(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	head := strings.TrimSpace(git(t, repo, "rev-parse", "HEAD"))
	tagFixture(t, repo, "v0.1.0")

	tags := strings.Fields(git(t, repo, "tag", "--list"))
	slices.Sort(tags)
	if want := []string{"cmd/tool/v0.1.0", "transport/echo/v0.1.0", "v0.1.0"}; !slices.Equal(tags, want) {
		t.Fatalf("tags = %q, want %q (devonly is unpublished)", tags, want)
	}
	commit := strings.TrimSpace(git(t, repo, "rev-parse", "v0.1.0^{commit}"))
	for _, tag := range tags {
		if c := strings.TrimSpace(git(t, repo, "rev-parse", tag+"^{commit}")); c != commit {
			t.Errorf("%s tags %s, v0.1.0 tags %s: one release commit expected", tag, c, commit)
		}
	}
	if parent := strings.TrimSpace(git(t, repo, "rev-parse", commit+"^")); parent != head {
		t.Errorf("the release commit's parent is %s, want the commit released, %s", parent, head)
	}
	if now := strings.TrimSpace(git(t, repo, "rev-parse", "HEAD")); now != head {
		t.Errorf("the branch moved to %s", now)
	}
	gomod := git(t, repo, "show", commit+":cmd/tool/go.mod")
	if strings.Contains(gomod, "replace") || !strings.Contains(gomod, "example.com/bqfix v0.1.0") || !strings.Contains(gomod, "example.com/bqfix/transport/echo v0.1.0") {
		t.Errorf("the released cmd/tool/go.mod:\n%s", gomod)
	}
	if sum := git(t, repo, "show", commit+":cmd/tool/go.sum"); !strings.Contains(sum, "example.com/bqfix/transport/echo v0.1.0 h1:") {
		t.Errorf("the released cmd/tool/go.sum lacks the sibling's sum:\n%s", sum)
	}
	if src := git(t, repo, "show", commit+":bqfix.go"); !strings.Contains(src, `const Version = "0.1.0"`) {
		t.Errorf("the released Version:\n%s", src)
	}
	if !regexp.MustCompile(`(?m)^## \[0\.1\.0\] - \d{4}-\d{2}-\d{2}$`).MatchString(git(t, repo, "show", commit+":CHANGELOG.md")) {
		t.Errorf("the released CHANGELOG section has no date")
	}
	if dev := git(t, repo, "show", "HEAD:cmd/tool/go.mod"); !strings.Contains(dev, "replace") {
		t.Errorf("the branch lost its development go.mod:\n%s", dev)
	}
	if gm := git(t, repo, "show", commit+":devonly/go.mod"); !strings.Contains(gm, "replace") {
		t.Errorf("the unpublished module was rewritten:\n%s", gm)
	}
}

func TestReleaseRefuses(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	ctx := context.Background()
	try := func(version string) error {
		var log bytes.Buffer
		return Release(ctx, ReleaseOptions{Options: options(t, repo, version, &log)})
	}

	write(t, filepath.Join(repo, "untracked.txt"), "x")
	if err := try("v0.1.0"); err == nil || !strings.Contains(err.Error(), "not clean") {
		t.Errorf("dirty tree: err = %v", err)
	}
	os.Remove(filepath.Join(repo, "untracked.txt"))
	write(t, filepath.Join(repo, "bqfix.go"), fixtureFiles["bqfix.go"]+"\n// changed\n")
	if err := try("v0.1.0"); err == nil || !strings.Contains(err.Error(), "not clean") {
		t.Errorf("modified file: err = %v", err)
	}
	git(t, repo, "checkout", "--quiet", "--", "bqfix.go")

	if err := try("v0.2.0"); !errors.Is(err, relstate.ErrNoSection) {
		t.Errorf("no CHANGELOG section: err = %v", err)
	}
	for _, v := range []string{"v0.1", "0.1.0", "v0.1.0+build", "v01.0.0", "v2.0.0"} {
		if err := try(v); err == nil {
			t.Errorf("version %q: no error", v)
		}
	}

	tagFixture(t, repo, "v0.1.0")
	write(t, filepath.Join(repo, "CHANGELOG.md"), fixtureFiles["CHANGELOG.md"]+"\n## [0.0.9]\n")
	commitAll(t, repo, "changelog")
	for _, v := range []string{"v0.1.0", "v0.0.9"} {
		if err := try(v); err == nil || !strings.Contains(err.Error(), "not above the last release, v0.1.0") {
			t.Errorf("version %s after v0.1.0: err = %v", v, err)
		}
	}
}

func TestCheckInstallsTheWorkTreeAtTheChangelogsVersion(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	// Uncommitted work counts: the check builds what is on disk.
	write(t, filepath.Join(repo, "transport/echo/echo.go"), strings.Replace(fixtureFiles["transport/echo/echo.go"], `"echo "`, `"ECHO "`, 1))
	var log bytes.Buffer
	if err := Check(context.Background(), options(t, repo, "", &log)); err != nil {
		t.Fatalf("check: %v\n%s", err, log.String())
	}
	for _, want := range []string{
		"release check of v0.1.0", // the CHANGELOG's section, no tag yet
		"API check: no module has been released yet",
		"go mod download of 3 modules",
		"quick start: go get example.com/bqfix@v0.1.0 example.com/bqfix/transport/echo@v0.1.0; go build: ok",
		"go install example.com/bqfix/cmd/tool@v0.1.0; tool version: tool 0.1.0 ECHO 0.1.0",
		"none 2, echo 3",
		"README.md, Modules: every module's go line and the module counts match",
		"release check passed",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the check does not print %q:\n%s", want, log.String())
		}
	}
}

func TestCheckFailsWhenTheREADMEDisagrees(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	md := strings.Replace(fixtureFiles["README.md"], "| `transport/echo` | 3 |", "| `transport/echo` | 4 |", 1)
	md = strings.Replace(md, "| `…/cmd/tool` | both | 1.26 |", "| `…/cmd/tool` | both | 1.25 |", 1)
	write(t, filepath.Join(repo, "README.md"), md)
	var log bytes.Buffer
	err := Check(context.Background(), options(t, repo, "", &log))
	if !errors.Is(err, ErrCheck) {
		t.Fatalf("err = %v, want ErrCheck\n%s", err, log.String())
	}
	for _, want := range []string{"echo: README 4, measured 3", "example.com/bqfix/cmd/tool: go line 1.25, but its go.mod says go 1.26.0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err does not say %q: %v", want, err)
		}
	}
}

// A go.mod left as in development (siblings at the placeholder version, replace
// directives) fails the install check.
func TestInstallCheckFailsOnADevelopmentGoMod(t *testing.T) {
	t.Parallel()
	repo := newFixture(t)
	ctx := context.Background()
	var log bytes.Buffer
	o := options(t, repo, "v0.1.0", &log)
	o.devState = true
	b, err := Prepare(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	err = b.Verify(ctx)
	if !errors.Is(err, ErrCheck) {
		t.Fatalf("err = %v, want ErrCheck\n%s", err, log.String())
	}
	for _, want := range []string{
		"example.com/bqfix/cmd/tool@v0.1.0/go.mod: replace example.com/bqfix => ../..",
		"requires example.com/bqfix at v0.0.0-00010101000000-000000000000, not the released v0.1.0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err does not say %q:\n%v", want, err)
		}
	}
}
