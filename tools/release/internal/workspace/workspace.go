// Package workspace reads the modules of the repository as go.work and each go.mod
// state them, at run time: which modules exist, which of them are published, which
// sibling modules each one requires, and the order in which they can be released.
//
// A module is published (tagged, put on the module proxy, installed by users) unless
// its go.mod carries a comment containing "babelqueue:unpublished" (development-only
// modules: benchmarks, the fault suite). Nothing here is hard-coded: a module that
// another change adds to go.work is released with the others.
package workspace

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// UnpublishedMarker in a comment of a go.mod keeps that module out of releases.
const UnpublishedMarker = "babelqueue:unpublished"

// Module is one module of the workspace.
type Module struct {
	// Dir is the module's directory relative to the repository root, slash-separated;
	// "." for the root module.
	Dir string
	// Path is the module path.
	Path string
	// Go is the module's go line ("1.26.0").
	Go string
	// Published is false for a go.mod marked with UnpublishedMarker.
	Published bool
	// Siblings are the module paths of the other workspace modules this module
	// requires (tests included, as go.mod lists them), sorted.
	Siblings []string
}

// Workspace is the set of modules go.work uses.
type Workspace struct {
	// Root is the repository's absolute directory (where go.work is).
	Root string
	// Modules in go.work's order.
	Modules []*Module
}

// Load reads root/go.work and every go.mod it uses.
func Load(root string) (*Workspace, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	ws := &Workspace{Root: root}
	byPath := map[string]*Module{}
	files := map[*Module]*modfile.File{}
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") {
			return nil, fmt.Errorf("go.work: use %s: a released module must live inside the repository", u.Path)
		}
		gomod := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
		data, err := os.ReadFile(gomod)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(gomod, data, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s: no module line", gomod)
		}
		m := &Module{Dir: dir, Path: f.Module.Mod.Path, Published: !hasMarker(f)}
		if f.Go != nil {
			m.Go = f.Go.Version
		}
		if byPath[m.Path] != nil {
			return nil, fmt.Errorf("go.work: module %s is used twice", m.Path)
		}
		byPath[m.Path] = m
		files[m] = f
		ws.Modules = append(ws.Modules, m)
	}
	for _, m := range ws.Modules {
		for _, r := range files[m].Require {
			if byPath[r.Mod.Path] != nil {
				m.Siblings = append(m.Siblings, r.Mod.Path)
			}
		}
		slices.Sort(m.Siblings)
		m.Siblings = slices.Compact(m.Siblings)
	}
	if ws.RootModule() == nil {
		return nil, errors.New("go.work does not use the repository root (use .)")
	}
	return ws, nil
}

func hasMarker(f *modfile.File) bool {
	found := false
	visit := func(c *modfile.Comments) {
		for _, list := range [][]modfile.Comment{c.Before, c.Suffix, c.After} {
			for _, com := range list {
				if strings.Contains(com.Token, UnpublishedMarker) {
					found = true
				}
			}
		}
	}
	for _, e := range f.Syntax.Stmt {
		visit(e.Comment())
	}
	visit(f.Syntax.Comment())
	return found
}

// RootModule is the module in the repository's root directory.
func (ws *Workspace) RootModule() *Module {
	for _, m := range ws.Modules {
		if m.Dir == "." {
			return m
		}
	}
	return nil
}

// Module returns the workspace module with the module path p, or nil.
func (ws *Workspace) Module(p string) *Module {
	for _, m := range ws.Modules {
		if m.Path == p {
			return m
		}
	}
	return nil
}

// Published returns the published modules in dependency order: every module comes
// after the siblings it requires. Modules are layered (the root, then what requires
// only the root, and so on: a module's layer is one above its highest sibling's), in
// go.work's order within a layer. A published module that requires an unpublished
// one, or a cycle of requirements, is an error: neither could be installed by version.
func (ws *Workspace) Published() ([]*Module, error) {
	if root := ws.RootModule(); !root.Published {
		return nil, fmt.Errorf("the root module %s is marked %s", root.Path, UnpublishedMarker)
	}
	layer := map[*Module]int{}
	visiting := map[*Module]bool{}
	var visit func(m *Module, stack []string) (int, error)
	visit = func(m *Module, stack []string) (int, error) {
		if l, ok := layer[m]; ok {
			return l, nil
		}
		if visiting[m] {
			return 0, fmt.Errorf("modules require each other in a cycle: %s -> %s", strings.Join(stack, " -> "), m.Path)
		}
		visiting[m] = true
		l := 0
		for _, p := range m.Siblings {
			dep := ws.Module(p)
			if !dep.Published {
				return 0, fmt.Errorf("%s is published but requires %s, which is marked %s", m.Path, p, UnpublishedMarker)
			}
			dl, err := visit(dep, append(stack, m.Path))
			if err != nil {
				return 0, err
			}
			l = max(l, dl+1)
		}
		layer[m] = l
		return l, nil
	}
	var order []*Module
	for _, m := range ws.Modules {
		if m.Published {
			if _, err := visit(m, nil); err != nil {
				return nil, err
			}
			order = append(order, m)
		}
	}
	slices.SortStableFunc(order, func(a, b *Module) int { return layer[a] - layer[b] })
	return order, nil
}

// Unpublished returns the modules marked with UnpublishedMarker, in go.work's order.
func (ws *Workspace) Unpublished() []*Module {
	var out []*Module
	for _, m := range ws.Modules {
		if !m.Published {
			out = append(out, m)
		}
	}
	return out
}

// TagPrefix is what a tag of module m starts with: "" for the root, "transport/redis/"
// for the module in that directory, as the go command looks the tags up.
func (m *Module) TagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir + "/"
}

// Tag is the git tag of version v of module m.
func (m *Module) Tag(v string) string { return m.TagPrefix() + v }

// VersionOfTag returns the version a tag names for module m, or "" when the tag is
// not a canonical semantic version of m.
func (m *Module) VersionOfTag(tag string) string {
	prefix := m.TagPrefix()
	if !strings.HasPrefix(tag, prefix) {
		return ""
	}
	v := strings.TrimPrefix(tag, prefix)
	if strings.Contains(v, "/") || !semver.IsValid(v) || semver.Canonical(v) != v {
		return ""
	}
	return v
}
