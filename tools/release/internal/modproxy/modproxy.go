// Package modproxy writes a module proxy on disk, in the layout that the go command
// reads through GOPROXY=file:///dir (the GOPROXY protocol of "go help goproxy"):
// $dir/<escaped module path>/@v/list, <version>.info, <version>.mod and <version>.zip.
// The zips are made by golang.org/x/mod/zip, which applies the go command's own rules
// (nested modules, vendor directories and version-control directories left out; file
// names and sizes checked), so the go command reads them exactly as it would read a
// tag fetched from the repository.
package modproxy

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// Proxy is a module proxy directory.
type Proxy struct {
	// Dir is the proxy's root directory.
	Dir string
}

// URL is the proxy's GOPROXY entry, file:///dir.
func (p *Proxy) URL() string {
	abs, err := filepath.Abs(p.Dir)
	if err != nil {
		abs = p.Dir
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// AddDir adds version v of module modPath from the module's directory dir (the
// directory holding its go.mod). t is the version's time, as .info reports it.
func (p *Proxy) AddDir(modPath, v, dir string, t time.Time) error {
	return p.add(modPath, v, t, func(w io.Writer, m module.Version) error {
		return modzip.CreateFromDir(w, m, dir)
	})
}

// AddGit adds version v of module modPath from a git revision of the repository at
// repoRoot; subdir is the module's directory in it ("" for the root).
func (p *Proxy) AddGit(modPath, v, repoRoot, revision, subdir string, t time.Time) error {
	return p.add(modPath, v, t, func(w io.Writer, m module.Version) error {
		return modzip.CreateFromVCS(w, m, repoRoot, revision, subdir)
	})
}

func (p *Proxy) add(modPath, v string, t time.Time, create func(io.Writer, module.Version) error) error {
	if !semver.IsValid(v) {
		return fmt.Errorf("modproxy: %s: version %q is not a semantic version", modPath, v)
	}
	m := module.Version{Path: modPath, Version: v}
	if err := module.Check(modPath, v); err != nil {
		return fmt.Errorf("modproxy: %w", err)
	}
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	escV, err := module.EscapeVersion(v)
	if err != nil {
		return err
	}
	vdir := filepath.Join(p.Dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	var zbuf bytes.Buffer
	if err := create(&zbuf, m); err != nil {
		return fmt.Errorf("modproxy: zip of %s: %w", m, err)
	}
	gomod, err := goModOf(zbuf.Bytes(), m)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, t.UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{escV + ".zip", zbuf.Bytes()}, {escV + ".mod", gomod}, {escV + ".info", info}} {
		if err := os.WriteFile(filepath.Join(vdir, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(vdir, "list"), v)
}

// goModOf returns the go.mod inside a module zip: the .mod file the proxy serves must
// be byte-identical to it, or the go command reports a checksum mismatch.
func goModOf(z []byte, m module.Version) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		return nil, err
	}
	name := m.Path + "@" + m.Version + "/go.mod"
	for _, f := range zr.File {
		if f.Name == name {
			rc, err := f.Open()
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			return io.ReadAll(rc)
		}
	}
	return nil, fmt.Errorf("modproxy: %s: no go.mod in the module", m)
}

func addToList(list, v string) error {
	data, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, v) {
		versions = append(versions, v)
	}
	semver.Sort(versions)
	return os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// Versions lists the versions of modPath the proxy holds, lowest first.
func (p *Proxy) Versions(modPath string) ([]string, error) {
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(p.Dir, filepath.FromSlash(esc), "@v", "list"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}
