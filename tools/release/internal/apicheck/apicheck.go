// Package apicheck compares the exported API of each released module with its last
// release (golang.org/x/exp/apidiff) and says whether the new version number allows
// the changes found.
//
// The rule is the one gorelease applies, semantic versioning as Go modules read it:
//
//   - an incompatible change (anything removed or changed in a way that can break a
//     caller) needs a new major version from v1 on; before v1, in v0, it needs at
//     least a new minor version (v0.3.x -> v0.4.0);
//   - a compatible addition needs at least a new minor version;
//   - a patch version changes no exported API.
//
// Main packages and internal packages have no API and are left out.
package apicheck

import (
	"context"
	"fmt"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/goenv"
)

// Bump is a kind of version change, in increasing order.
type Bump int

// The kinds of version change.
const (
	Patch Bump = iota
	Minor
	Major
)

// String is "patch", "minor" or "major".
func (b Bump) String() string {
	return [...]string{"patch", "minor", "major"}[b]
}

// BumpOf is the kind of change from old to new (new above old).
func BumpOf(old, new string) Bump {
	switch {
	case semver.Major(old) != semver.Major(new):
		return Major
	case semver.MajorMinor(old) != semver.MajorMinor(new):
		return Minor
	default:
		return Patch
	}
}

// Needed is the smallest change that a report allows from base: see the package doc.
func Needed(base string, r apidiff.Report) Bump {
	incompatible, compatible := false, false
	for _, c := range r.Changes {
		if c.Compatible {
			compatible = true
		} else {
			incompatible = true
		}
	}
	switch {
	case incompatible && semver.Major(base) != "v0":
		return Major
	case incompatible, compatible:
		return Minor
	default:
		return Patch
	}
}

// Module is one module to compare.
type Module struct {
	// Path is the module path; Base its last released version ("" when it has none).
	Path, Base string
}

// Result is the comparison of one module.
type Result struct {
	Module
	// Version is the version compared with Base.
	Version string
	// Report lists the changes; Needed and Got the smallest bump they need and the one
	// the versions make.
	Report      apidiff.Report
	Needed, Got Bump
}

// OK tells whether the version allows the changes.
func (r *Result) OK() bool { return r.Got >= r.Needed }

// Config is what Run needs.
type Config struct {
	// Env runs the go commands; its proxy holds every module at its base version and
	// at Version.
	Env *goenv.Env
	// Dir is a scratch directory.
	Dir string
	// Version is the version being released.
	Version string
	// Modules to compare; those without a base are new and skipped.
	Modules []Module
	// VersionConst is the module path whose root package has the Version constant
	// that every release sets: its change of value is no API change.
	VersionConst string
	// Log receives the reports.
	Log io.Writer
}

// Run compares every module that has a base with the release at c.Version, and
// returns one result per module compared. The error is for a comparison that could
// not be made; a version that does not allow the changes is a result that is not OK.
func Run(ctx context.Context, c Config) ([]*Result, error) {
	var compared []Module
	for _, m := range c.Modules {
		if m.Base != "" {
			compared = append(compared, m)
		}
	}
	if len(compared) == 0 {
		return nil, nil
	}
	oldAPI, err := load(ctx, c, "api-base", compared, func(m Module) string { return m.Base })
	if err != nil {
		return nil, err
	}
	newAPI, err := load(ctx, c, "api-new", compared, func(Module) string { return c.Version })
	if err != nil {
		return nil, err
	}
	var out []*Result
	for _, m := range compared {
		r := &Result{Module: m, Version: c.Version}
		r.Report = apidiff.ModuleChanges(oldAPI[m.Path], newAPI[m.Path])
		if m.Path == c.VersionConst {
			r.Report.Changes = slices.DeleteFunc(r.Report.Changes, func(ch apidiff.Change) bool {
				return versionChange.MatchString(ch.Message)
			})
		}
		r.Needed, r.Got = Needed(m.Base, r.Report), BumpOf(m.Base, c.Version)
		out = append(out, r)
	}
	return out, nil
}

// versionChange is apidiff's message for the new value of the root's Version.
var versionChange = regexp.MustCompile(`^Version: value changed from "[^"]*" to "[^"]*"$`)

// Print writes the results, one paragraph per module that changed.
func Print(w io.Writer, results []*Result) {
	for _, r := range results {
		verdict := "ok"
		if !r.OK() {
			verdict = fmt.Sprintf("FAIL: these changes need a %s version, %s is a %s release", r.Needed, r.Version, r.Got)
			if r.Needed == Major {
				verdict += " (a new major version needs a new module path ending in /" + nextMajor(r.Base) + ")"
			}
		}
		fmt.Fprintf(w, "  %s %s -> %s: %d incompatible, %d compatible changes: %s\n",
			r.Path, r.Base, r.Version, count(r.Report, false), count(r.Report, true), verdict)
		if len(r.Report.Changes) > 0 {
			for _, line := range strings.Split(strings.TrimRight(r.Report.String(), "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
	}
}

func nextMajor(v string) string {
	var major int
	fmt.Sscanf(semver.Major(v), "v%d", &major)
	return fmt.Sprintf("v%d", major+1)
}

func count(r apidiff.Report, compatible bool) int {
	n := 0
	for _, c := range r.Changes {
		if c.Compatible == compatible {
			n++
		}
	}
	return n
}

// load requires every module at the version chosen in a scratch module of its own,
// as a user would, and loads the type information of each module's packages.
func load(ctx context.Context, c Config, name string, mods []Module, version func(Module) string) (map[string]*apidiff.Module, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/"+name+"\n\ngo 1.26\n"), 0o644); err != nil {
		return nil, err
	}
	get := []string{"get"}
	var patterns []string
	for _, m := range mods {
		get = append(get, m.Path+"@"+version(m))
		patterns = append(patterns, m.Path+"/...")
	}
	if _, err := c.Env.Go(ctx, dir, get...); err != nil {
		return nil, fmt.Errorf("apicheck: %w", err)
	}
	cfg := &packages.Config{
		Context:    ctx,
		Mode:       packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:        dir,
		Env:        c.Env.Vars(),
		BuildFlags: []string{"-mod=mod"},
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("apicheck: loading %s: %w", strings.Join(patterns, " "), err)
	}
	out := map[string]*apidiff.Module{}
	for _, m := range mods {
		out[m.Path] = &apidiff.Module{Path: m.Path}
	}
	var errs []string
	for _, p := range pkgs {
		if p.Module == nil || out[p.Module.Path] == nil || p.Name == "main" || isInternal(p.PkgPath, p.Module.Path) {
			continue
		}
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		out[p.Module.Path].Packages = append(out[p.Module.Path].Packages, p.Types)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("apicheck: %s: %s", name, strings.Join(errs, "; "))
	}
	for _, m := range out {
		slices.SortFunc(m.Packages, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	}
	return out, nil
}

// isInternal tells whether pkgPath is an internal package of module modPath (or below
// an internal directory of it).
func isInternal(pkgPath, modPath string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkgPath, modPath), "/")
	for _, elem := range strings.Split(rel, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}
