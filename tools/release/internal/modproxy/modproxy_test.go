package modproxy

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The go command downloads what the proxy holds: the module's files without the
// nested module, the .mod identical to the zip's go.mod; and lists the versions.
func TestTheGoCommandReadsTheProxy(t *testing.T) {
	src := t.TempDir()
	write(t, src, map[string]string{
		"go.mod":        "module m.test/r\n\ngo 1.24.0\n",
		"r.go":          "package r\n\nconst Version = \"0.1.0\"\n",
		"sub/sub.go":    "package sub\n",
		"nested/go.mod": "module m.test/r/nested\n\ngo 1.24.0\n",
		"nested/n.go":   "package nested\n",
	})
	p := &Proxy{Dir: filepath.Join(t.TempDir(), "proxy")}
	when := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, v := range []string{"v0.2.0", "v0.1.0"} {
		if err := p.AddDir("m.test/r", v, src, when); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddDir("m.test/r/nested", "v0.1.0", filepath.Join(src, "nested"), when); err != nil {
		t.Fatal(err)
	}
	if vs, err := p.Versions("m.test/r"); err != nil || !slices.Equal(vs, []string{"v0.1.0", "v0.2.0"}) {
		t.Errorf("Versions = %q, %v", vs, err)
	}

	user := t.TempDir()
	write(t, user, map[string]string{"go.mod": "module example.com/user\n\ngo 1.26\n"})
	env := []string{"GOWORK=off", "GOPROXY=" + p.URL(), "GOSUMDB=off", "GOFLAGS=-modcacherw", "GOMODCACHE=" + filepath.Join(t.TempDir(), "modcache")}
	out := run(t, user, env, "go", "mod", "download", "-json", "m.test/r@v0.1.0")
	var d struct{ Zip, GoMod, Error string }
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Error != "" {
		t.Fatalf("go mod download: %v %s\n%s", err, d.Error, out)
	}
	zr, err := zip.OpenReader(d.Zip)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if want := []string{"m.test/r@v0.1.0/go.mod", "m.test/r@v0.1.0/r.go", "m.test/r@v0.1.0/sub/sub.go"}; !slices.Equal(names, want) {
		t.Errorf("zip files = %q, want %q (no nested module)", names, want)
	}
	if got := run(t, user, env, "go", "list", "-m", "-versions", "m.test/r"); strings.TrimSpace(got) != "m.test/r v0.1.0 v0.2.0" {
		t.Errorf("go list -m -versions = %q", got)
	}
	if got := run(t, user, env, "go", "get", "m.test/r/nested@v0.1.0"); !strings.Contains(got, "added m.test/r/nested v0.1.0") {
		t.Errorf("go get of the nested module: %s", got)
	}
}

func TestAddGitZipsATag(t *testing.T) {
	repo := t.TempDir()
	write(t, repo, map[string]string{
		"go.mod":             "module m.test/r\n\ngo 1.24.0\n",
		"r.go":               "package r\n",
		"transport/a/go.mod": "module m.test/r/transport/a\n\ngo 1.24.0\n",
		"transport/a/a.go":   "package a\n\nconst Tagged = true\n",
	})
	git := []string{"-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "commit.gpgsign=false"}
	run(t, repo, nil, "git", "init", "--quiet")
	run(t, repo, nil, "git", append(git, "add", "--all")...)
	run(t, repo, nil, "git", append(git, "commit", "--quiet", "-m", "one")...)
	run(t, repo, nil, "git", "tag", "transport/a/v0.1.0")
	write(t, repo, map[string]string{"transport/a/a.go": "package a\n\nconst Tagged = false\n"})

	p := &Proxy{Dir: t.TempDir()}
	if err := p.AddGit("m.test/r/transport/a", "v0.1.0", repo, "transport/a/v0.1.0", "transport/a", time.Now()); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(filepath.Join(p.Dir, "m.test/r/transport/a/@v/v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.Name == "m.test/r/transport/a@v0.1.0/a.go" {
			rc, _ := f.Open()
			b := make([]byte, 100)
			n, _ := rc.Read(b)
			rc.Close()
			if !strings.Contains(string(b[:n]), "Tagged = true") {
				t.Errorf("a.go is not the tagged one: %q", b[:n])
			}
			return
		}
	}
	t.Error("a.go is not in the zip")
}
