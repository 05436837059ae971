// Package release builds the release state of the repository in a scratch copy and
// a local module proxy holding it: the state a tag would publish, in the layout the go
// command downloads. The release command tags it; the install and API checks of make
// test install and compare it.
package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/gitx"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/goenv"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/modproxy"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/relstate"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/workspace"
)

// Source says what the scratch copy is made from.
type Source int

const (
	// WorkTree copies the files git would commit from the work tree, committed or not
	// (make test checks what is on disk).
	WorkTree Source = iota
	// Head clones the repository at its checked-out commit (a release is made from a
	// commit, never from uncommitted files).
	Head
)

// Options configure Prepare.
type Options struct {
	// Repo is a directory inside the repository.
	Repo string
	// Version to release; "" means relstate.NextVersion.
	Version string
	// Source of the scratch copy.
	Source Source
	// Scratch is the directory to work in; "" makes a temporary one that Close
	// removes.
	Scratch string
	// PublicProxy overrides the public module proxies of the user's GOPROXY ("off":
	// none).
	PublicProxy string
	// Only, when set, restricts the release to these module paths (and nothing that
	// requires another module); for tests.
	Only []string
	// Log receives progress; Verbose adds every go command.
	Log     io.Writer
	Verbose bool

	// devState leaves the go.mod files as they are in development (a test hook: the
	// install check must fail on them).
	devState bool
}

// Build is a scratch copy of the repository and, after Apply, its release state.
type Build struct {
	opts Options
	// Repo is the repository's root directory.
	Repo string
	// Commit is the commit the copy was made from, Time its committer time.
	Commit string
	Time   time.Time
	// Tree is the scratch copy's root.
	Tree string
	// Scratch is the working directory: Tree, the proxy, the module cache.
	Scratch string
	// Version being released; Last is the highest version tagged before ("" none).
	Version, Last string
	// Tags are the repository's tags.
	Tags []string
	// Workspace of the copy; Modules the published ones in dependency order.
	Workspace *workspace.Workspace
	Modules   []*workspace.Module
	// Proxy holds the released modules once Apply returned.
	Proxy *modproxy.Proxy
	// Env runs go commands as a user would, against Proxy.
	Env *goenv.Env

	ownScratch bool
}

// Prepare makes the scratch copy and reads its workspace. It refuses a version that
// is not a semantic version above the last tag.
func Prepare(ctx context.Context, o Options) (*Build, error) {
	top, err := gitx.Git(o.Repo, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	b := &Build{opts: o, Repo: strings.TrimSpace(top), Scratch: o.Scratch}
	if b.Commit, b.Time, err = gitx.Head(b.Repo); err != nil {
		return nil, err
	}
	if b.Tags, err = gitx.Tags(b.Repo); err != nil {
		return nil, err
	}
	if b.Scratch == "" {
		if b.Scratch, err = os.MkdirTemp("", "babelqueue-release-"); err != nil {
			return nil, err
		}
		b.ownScratch = true
	}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	b.Tree = filepath.Join(b.Scratch, "tree")
	switch o.Source {
	case Head:
		err = gitx.Clone(b.Repo, b.Tree, b.Commit)
	default:
		err = gitx.CopyWorkTree(b.Repo, b.Tree)
	}
	if err != nil {
		return nil, err
	}
	if b.Workspace, err = workspace.Load(b.Tree); err != nil {
		return nil, err
	}
	if b.Modules, err = b.Workspace.Published(); err != nil {
		return nil, err
	}
	if len(o.Only) > 0 {
		if b.Modules, err = restrict(b.Modules, o.Only); err != nil {
			return nil, err
		}
	}
	b.Last = LastVersion(b.Workspace, b.Tags)
	b.Version = o.Version
	if b.Version == "" {
		changelog, _ := os.ReadFile(filepath.Join(b.Tree, "CHANGELOG.md"))
		b.Version = relstate.NextVersion(changelog, b.Last)
	}
	if err := relstate.CheckNewVersion(b.Version, b.Last); err != nil {
		return nil, err
	}
	b.Proxy = &modproxy.Proxy{Dir: filepath.Join(b.Scratch, "proxy")}
	var log io.Writer
	if o.Verbose {
		log = o.Log
	}
	b.Env, err = goenv.New(ctx, goenv.Config{
		Scratch:      b.Scratch,
		LocalProxy:   b.Proxy.URL(),
		ModulePrefix: b.Workspace.RootModule().Path,
		PublicProxy:  o.PublicProxy,
		Log:          log,
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

func restrict(mods []*workspace.Module, only []string) ([]*workspace.Module, error) {
	keep := map[string]bool{}
	for _, p := range only {
		keep[p] = true
	}
	var out []*workspace.Module
	for _, m := range mods {
		if !keep[m.Path] {
			continue
		}
		for _, s := range m.Siblings {
			if !keep[s] {
				return nil, fmt.Errorf("%s requires %s, which is not among the modules released", m.Path, s)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// LastVersion is the highest version any published module of ws is tagged with
// ("" when none is).
func LastVersion(ws *workspace.Workspace, tags []string) string {
	last := ""
	for _, m := range ws.Modules {
		if !m.Published {
			continue
		}
		if v := LastTag(m, tags); v != "" && (last == "" || semver.Compare(v, last) > 0) {
			last = v
		}
	}
	return last
}

// LastTag is the highest version module m is tagged with ("" when none).
func LastTag(m *workspace.Module, tags []string) string {
	last := ""
	for _, t := range tags {
		if v := m.VersionOfTag(t); v != "" && semver.Prerelease(v) == "" && (last == "" || semver.Compare(v, last) > 0) {
			last = v
		}
	}
	return last
}

// Printf writes progress to the log.
func (b *Build) Printf(format string, args ...any) {
	if b.opts.Log != nil {
		fmt.Fprintf(b.opts.Log, format, args...)
	}
}

// Apply turns the copy into the release state and fills the proxy, module by module
// in dependency order: set the requirements of siblings to the version and drop their
// replace directives, set the root's Version constant (and, for a release, date the
// CHANGELOG section), run "go mod tidy" with the proxy (which by then holds every
// sibling the module requires, so go.sum gets their sums), check the go.mod can be
// installed by version, and zip the module into the proxy.
func (b *Build) Apply(ctx context.Context) error {
	siblings := map[string]bool{}
	for _, m := range b.Workspace.Modules {
		siblings[m.Path] = true
	}
	if !b.opts.devState {
		for _, m := range b.Modules {
			if err := relstate.SetRequirements(b.path(m, "go.mod"), siblings, b.Version); err != nil {
				return err
			}
		}
		if _, err := relstate.SetVersionConst(b.Tree, b.Version); err != nil {
			return err
		}
		if b.opts.Source == Head {
			if err := relstate.DateChangelog(filepath.Join(b.Tree, "CHANGELOG.md"), b.Version, time.Now()); err != nil {
				return err
			}
		}
	}
	for _, m := range b.Modules {
		start := time.Now()
		if !b.opts.devState {
			if _, err := b.Env.Go(ctx, b.path(m, ""), "mod", "tidy"); err != nil {
				return fmt.Errorf("release state of %s: %w", m.Path, err)
			}
			data, err := os.ReadFile(b.path(m, "go.mod"))
			if err != nil {
				return err
			}
			if err := relstate.CheckPublishable(filepath.Join(m.Dir, "go.mod"), data, siblings, b.Version); err != nil {
				return err
			}
		}
		if err := b.Proxy.AddDir(m.Path, b.Version, b.path(m, ""), b.Time); err != nil {
			return err
		}
		b.Printf("  %-28s %-52s %6.1fs\n", m.Tag(b.Version), m.Path, time.Since(start).Seconds())
	}
	return nil
}

func (b *Build) path(m *workspace.Module, name string) string {
	return filepath.Join(b.Tree, filepath.FromSlash(m.Dir), name)
}

// Diff is "git diff" of the copy against the commit it was made from: the changes the
// release makes.
func (b *Build) Diff(args ...string) (string, error) {
	return gitx.Git(b.Tree, append([]string{"diff", "HEAD"}, args...)...)
}

// CommitAndTag commits the release state in the copy and tags it, one tag per module in
// dependency order; it returns the commit and the tags.
func (b *Build) CommitAndTag() (string, []string, error) {
	if _, err := gitx.Git(b.Tree, "add", "--all"); err != nil {
		return "", nil, err
	}
	msg := fmt.Sprintf("release %s\n\nThe release state of %s: every published module requires its siblings at %s\nand keeps no replace directive; Version is %q.", b.Version, b.Commit, b.Version, strings.TrimPrefix(b.Version, "v"))
	if _, err := gitx.Git(b.Tree, "commit", "--quiet", "-m", msg); err != nil {
		return "", nil, err
	}
	commit, _, err := gitx.Head(b.Tree)
	if err != nil {
		return "", nil, err
	}
	var tags []string
	for _, m := range b.Modules {
		t := m.Tag(b.Version)
		if _, err := gitx.Git(b.Tree, "tag", "--annotate", "-m", m.Path+" "+b.Version, t, commit); err != nil {
			return "", nil, err
		}
		tags = append(tags, t)
	}
	return commit, tags, nil
}

// SeedSums returns the go.sum lines of every module in the copy: what a scratch
// module's go.sum starts from when the checksum database cannot be reached.
func (b *Build) SeedSums() ([]byte, error) {
	var out []byte
	seen := map[string]bool{}
	for _, m := range b.Workspace.Modules {
		data, err := os.ReadFile(b.path(m, "go.sum"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line != "" && !seen[line] && !strings.HasPrefix(line, b.Workspace.RootModule().Path) {
				seen[line] = true
				out = append(out, line+"\n"...)
			}
		}
	}
	return out, nil
}

// Close removes the scratch directory when Prepare made it.
func (b *Build) Close() error {
	if b.ownScratch && b.Scratch != "" {
		return goenv.RemoveAll(b.Scratch)
	}
	return nil
}
