package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/apicheck"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/gitx"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/installcheck"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/readme"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/relstate"
)

// ErrCheck is returned (wrapped) when the release state fails a check: it cannot be
// installed, the README disagrees with it, or its version does not allow its API
// changes.
var ErrCheck = errors.New("release check failed")

// Check is what make test runs: the release state of the work tree at the next
// version (relstate.NextVersion) is built into a local proxy, installed as a user
// installs it, compared with the README, and its API compared with the last release.
func Check(ctx context.Context, o Options) error {
	start := time.Now()
	o.Source = WorkTree
	b, err := Prepare(ctx, o)
	if err != nil {
		return err
	}
	defer b.Close()
	b.Printf("release check of %s at %s (last release: %s), from the work tree of %s\n", b.Version, b.Workspace.RootModule().Path, orNone(b.Last), short(b.Commit))
	b.printEnv()
	b.Printf("release state, modules in dependency order (go mod tidy against the local proxy, then zipped into it):\n")
	if err := b.Apply(ctx); err != nil {
		return err
	}
	if err := b.Verify(ctx); err != nil {
		return err
	}
	b.Printf("release check passed in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// Verify runs the checks on an applied build: the API comparison with the last
// release, the install check and the README's Modules tables.
func (b *Build) Verify(ctx context.Context) error {
	var failed []error
	results, err := b.CompareAPI(ctx)
	if err != nil {
		return err
	}
	for _, r := range results {
		if !r.OK() {
			failed = append(failed, fmt.Errorf("%w: %s: the API changes since %s need a %s version, not %s", ErrCheck, r.Path, r.Base, r.Needed, b.Version))
		}
	}

	md, err := os.ReadFile(filepath.Join(b.Tree, "README.md"))
	if err != nil {
		return err
	}
	qs, err := readme.QuickStart(md)
	if err != nil {
		return err
	}
	var seed []byte
	if !b.Env.SumDBReachable {
		if seed, err = b.SeedSums(); err != nil {
			return err
		}
	}
	b.Printf("install check (scratch modules outside the repository, GOWORK=off):\n")
	res, err := installcheck.Run(ctx, installcheck.Config{
		Env:        b.Env,
		Dir:        filepath.Join(b.Scratch, "user"),
		Version:    b.Version,
		Modules:    b.Modules,
		QuickStart: qs,
		SeedSums:   seed,
		Log:        b.opts.Log,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheck, err)
	}
	if err := readme.Check(md, b.Workspace, res.Counts); err != nil {
		failed = append(failed, fmt.Errorf("%w: %w", ErrCheck, err))
	} else {
		b.Printf("  README.md, Modules: every module's go line and the module counts match\n")
	}
	return errors.Join(failed...)
}

// CompareAPI adds the last release of every module to the proxy (from its tag) and
// compares each module's API with it. No tag: nothing to compare.
func (b *Build) CompareAPI(ctx context.Context) ([]*apicheck.Result, error) {
	var mods []apicheck.Module
	bases := 0
	for _, m := range b.Modules {
		base := LastTag(m, b.Tags)
		mods = append(mods, apicheck.Module{Path: m.Path, Base: base})
		if base == "" {
			continue
		}
		bases++
		subdir := ""
		if m.Dir != "." {
			subdir = m.Dir
		}
		if err := b.Proxy.AddGit(m.Path, base, b.Repo, m.Tag(base), subdir, b.Time); err != nil {
			return nil, err
		}
	}
	if bases == 0 {
		b.Printf("API check: no module has been released yet, nothing to compare (it runs once a first version is tagged)\n")
		return nil, nil
	}
	b.Printf("API check against the last release of each module (golang.org/x/exp/apidiff):\n")
	for _, m := range mods {
		if m.Base == "" {
			b.Printf("  %s: new module, no earlier release\n", m.Path)
		}
	}
	results, err := apicheck.Run(ctx, apicheck.Config{
		Env:          b.Env,
		Dir:          filepath.Join(b.Scratch, "api"),
		Version:      b.Version,
		Modules:      mods,
		VersionConst: b.Workspace.RootModule().Path,
	})
	if err != nil {
		return nil, err
	}
	if b.opts.Log != nil {
		apicheck.Print(b.opts.Log, results)
	}
	return results, nil
}

func (b *Build) printEnv() {
	sum := "checksum database reachable: third-party modules checked against it"
	if !b.Env.SumDBReachable {
		sum = "checksum database off or not reachable: GOSUMDB=off, scratch go.sum files seeded from the repository's"
	}
	b.Printf("  GOPROXY=%s\n  GONOSUMDB=%s; %s\n", b.Env.Proxy, b.Env.NoSumDB, sum)
}

// ReleaseOptions configure Release.
type ReleaseOptions struct {
	Options
	// Push tags for real, pushing the tags into the repository; without it (the zero
	// value) Release is a dry run that tags nothing there.
	Push bool
	// SkipChecks skips the API and install checks (not for real releases).
	SkipChecks bool
}

// Release makes release o.Version from the checked-out commit in a scratch clone:
// the release state, its checks, a release commit (whose parent is the commit
// released; the branch keeps its development go.mod files) and one tag per module in
// dependency order. With Push, it then pushes the tags into the repository.
func Release(ctx context.Context, o ReleaseOptions) error {
	if o.Version == "" {
		return errors.New("release: a version is required (vX.Y.Z)")
	}
	top, err := gitx.Git(o.Repo, "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	repo := strings.TrimSpace(top)
	dirty, err := gitx.Dirty(repo)
	if err != nil {
		return err
	}
	if len(dirty) > 0 {
		return fmt.Errorf("release: the work tree of %s is not clean (commit or stash first):\n  %s", repo, strings.Join(dirty, "\n  "))
	}
	o.Source = Head
	b, err := Prepare(ctx, o.Options)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer b.Close()
	if err := relstate.CheckChangelog(b.Tree, b.Version); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	mode := "DRY RUN (nothing is pushed; -dry-run=false to tag)"
	if o.Push {
		mode = "for real: the tags are pushed into " + repo
	}
	b.Printf("release %s of %s from %s, %s\n", b.Version, b.Workspace.RootModule().Path, short(b.Commit), mode)
	b.Printf("last release: %s\n", orNone(b.Last))
	b.printEnv()
	b.Printf("modules, in dependency order (tag, module path, time to make its release state):\n")
	if err := b.Apply(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	for _, m := range b.Workspace.Unpublished() {
		b.Printf("  not released (go.mod marked babelqueue:unpublished): %s\n", m.Dir)
	}
	if !o.SkipChecks {
		if err := b.Verify(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	stat, err := b.Diff("--stat")
	if err != nil {
		return err
	}
	b.Printf("changes the release commit makes:\n%s", stat)
	diff, err := b.Diff("--", "*.go", "go.mod", "*/go.mod", "CHANGELOG.md")
	if err != nil {
		return err
	}
	b.Printf("%s", diff)
	b.Printf("(go.sum files: the sums of the sibling modules at %s, as go mod tidy wrote them)\n", b.Version)
	commit, tags, err := b.CommitAndTag()
	if err != nil {
		return err
	}
	b.Printf("release commit %s (parent %s); tags, in dependency order:\n", short(commit), short(b.Commit))
	for _, t := range tags {
		b.Printf("  %s\n", t)
	}
	if !o.Push {
		b.Printf("dry run: nothing tagged in %s\n", repo)
		return nil
	}
	if _, err := gitx.Git(b.Tree, append([]string{"push", "--quiet", "origin"}, tags...)...); err != nil {
		return err
	}
	b.Printf("tagged in %s. To publish: git push origin %s\n", repo, strings.Join(tags, " "))
	return nil
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
