// Package relstate makes the edits that turn a copy of the repository into the release
// state of one version: each published go.mod requires its sibling modules at that
// version and keeps no replace directive, the root package's Version constant names
// it, and CHANGELOG.md's section for it carries the release date. It also reads what
// it needs to decide a version: the CHANGELOG's sections and the repository's tags.
package relstate

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// SetRequirements rewrites the go.mod at gomod for a release at version v: every
// requirement of a module in siblings is set to v, and every replace directive of a
// sibling is dropped. A replace of any other module is an error: a go.mod that needs a
// replace cannot be installed by version (the go command ignores a dependency's
// replace directives, and "go install pkg@version" refuses a module that has any).
func SetRequirements(gomod string, siblings map[string]bool, v string) error {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(gomod, data, nil)
	if err != nil {
		return err
	}
	for _, r := range f.Require {
		if siblings[r.Mod.Path] {
			if err := f.AddRequire(r.Mod.Path, v); err != nil {
				return err
			}
		}
	}
	for _, r := range slices.Clone(f.Replace) {
		if !siblings[r.Old.Path] {
			return fmt.Errorf("%s: replace %s => %s: only sibling modules may be replaced, and only in development", gomod, r.Old.Path, r.New.Path)
		}
		if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return err
		}
	}
	if len(f.Exclude) > 0 {
		return fmt.Errorf("%s: exclude %s: \"go install pkg@version\" refuses a module with exclude directives", gomod, f.Exclude[0].Mod)
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(gomod, out, 0o644)
}

// CheckPublishable reports why the go.mod data could not be installed by version v
// from a module proxy: a replace or exclude directive, or a sibling module required at
// any other version than v (the placeholder v0.0.0-00010101000000-000000000000 of
// development, which no proxy has).
func CheckPublishable(name string, data []byte, siblings map[string]bool, v string) error {
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range f.Replace {
		errs = append(errs, fmt.Errorf("%s: replace %s => %s", name, r.Old.Path, r.New.Path))
	}
	for _, e := range f.Exclude {
		errs = append(errs, fmt.Errorf("%s: exclude %s", name, e.Mod))
	}
	for _, r := range f.Require {
		if siblings[r.Mod.Path] && r.Mod.Version != v {
			errs = append(errs, fmt.Errorf("%s: requires %s at %s, not the released %s", name, r.Mod.Path, r.Mod.Version, v))
		}
	}
	return errors.Join(errs...)
}

// SetVersionConst sets the string constant named Version of the package in dir (its
// non-test files) to v without the leading "v" ("0.3.0"), and returns the file it
// changed. A package without such a constant is an error.
func SetVersionConst(dir, v string) (string, error) {
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, name := range matches {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return "", err
		}
		lit := versionLiteral(f)
		if lit == nil {
			continue
		}
		start, end := fset.Position(lit.Pos()).Offset, fset.Position(lit.End()).Offset
		out := slices.Concat(src[:start], []byte(strconv.Quote(strings.TrimPrefix(v, "v"))), src[end:])
		return name, os.WriteFile(name, out, 0o644)
	}
	return "", fmt.Errorf("%s: no package-level const Version = \"...\"", dir)
}

func versionLiteral(f *ast.File) *ast.BasicLit {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name != "Version" || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					return lit
				}
			}
		}
	}
	return nil
}

// changelogHeading matches a version section of a Keep a Changelog file:
// "## [0.3.0]" or "## [0.3.0] - 2026-01-31".
var changelogHeading = regexp.MustCompile(`(?m)^## \[v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)\]([^\n]*)$`)

// ChangelogVersions returns the versions that CHANGELOG.md data has a section for,
// as canonical semantic versions ("v0.3.0"), in the file's order.
func ChangelogVersions(data []byte) []string {
	var out []string
	for _, m := range changelogHeading.FindAllSubmatch(data, -1) {
		if v := "v" + string(m[1]); semver.IsValid(v) {
			out = append(out, semver.Canonical(v))
		}
	}
	return out
}

// DateChangelog gives the CHANGELOG section of version v the date day when it has
// none ("## [0.3.0]" or "## [0.3.0] - Unreleased" becomes "## [0.3.0] - 2026-01-31").
// A section that is missing is an error.
func DateChangelog(path, v string, day time.Time) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, loc := range changelogHeading.FindAllSubmatchIndex(data, -1) {
		if "v"+string(data[loc[2]:loc[3]]) != v {
			continue
		}
		rest := strings.TrimSpace(string(data[loc[4]:loc[5]]))
		if regexp.MustCompile(`^- \d{4}-\d{2}-\d{2}`).MatchString(rest) {
			return nil
		}
		heading := fmt.Sprintf("## [%s] - %s", strings.TrimPrefix(v, "v"), day.UTC().Format(time.DateOnly))
		out := slices.Concat(data[:loc[0]], []byte(heading), data[loc[1]:])
		return os.WriteFile(path, out, 0o644)
	}
	return fmt.Errorf("%s: no section \"## [%s]\"", path, strings.TrimPrefix(v, "v"))
}

// HasChangelogSection reports whether CHANGELOG.md data has a section for v.
func HasChangelogSection(data []byte, v string) bool {
	return slices.Contains(ChangelogVersions(data), v)
}

// NextVersion is the version that the current commit would be released as, for the
// checks of make test: the newest version CHANGELOG.md has a section for when it is
// above last (the highest tag; "" when there is none); otherwise the patch release
// after last; otherwise (no tag, no section) v0.1.0.
func NextVersion(changelog []byte, last string) string {
	best := ""
	for _, v := range ChangelogVersions(changelog) {
		if (last == "" || semver.Compare(v, last) > 0) && (best == "" || semver.Compare(v, best) > 0) {
			best = v
		}
	}
	switch {
	case best != "":
		return best
	case last != "":
		return PatchAfter(last)
	default:
		return "v0.1.0"
	}
}

// PatchAfter returns the patch release after v (v0.3.0 -> v0.3.1; a pre-release
// v0.4.0-rc.1 -> v0.4.0).
func PatchAfter(v string) string {
	if semver.Prerelease(v) != "" {
		return strings.TrimSuffix(v, semver.Prerelease(v))
	}
	var major, minor, patch int
	fmt.Sscanf(v, "v%d.%d.%d", &major, &minor, &patch)
	return fmt.Sprintf("v%d.%d.%d", major, minor, patch+1)
}

// CheckNewVersion refuses a version v that is not a canonical semantic version
// (vMAJOR.MINOR.PATCH, an optional pre-release), that is not above last (the highest
// tag, "" when none), or whose major version the module paths cannot carry (v2 and
// above need a /vN path suffix).
func CheckNewVersion(v, last string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("version %q is not a semantic version vMAJOR.MINOR.PATCH", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %s: a major version above v1 needs module paths ending in /%s", v, m)
	}
	if last != "" && semver.Compare(v, last) <= 0 {
		return fmt.Errorf("version %s is not above the last release, %s", v, last)
	}
	return nil
}

// ErrNoSection is returned when CHANGELOG.md lacks the section of a version.
var ErrNoSection = errors.New("no CHANGELOG section")

// CheckChangelog returns ErrNoSection (wrapped with the heading to add) when
// CHANGELOG.md in root has no section for v.
func CheckChangelog(root, v string) error {
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	if !HasChangelogSection(data, v) {
		return fmt.Errorf("%w: CHANGELOG.md needs a section \"## [%s]\" (Keep a Changelog) before %s is released", ErrNoSection, strings.TrimPrefix(v, "v"), v)
	}
	return nil
}
