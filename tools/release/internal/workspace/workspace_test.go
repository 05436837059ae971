package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func gomod(path string, requires ...string) string {
	s := "module " + path + "\n\ngo 1.26.0\n"
	for _, r := range requires {
		s += "\nrequire " + r + " v0.0.0-00010101000000-000000000000\n"
	}
	return s
}

func paths(mods []*Module) string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Dir)
	}
	return strings.Join(out, " ")
}

func TestPublishedInDependencyLayers(t *testing.T) {
	dir := writeTree(t, map[string]string{
		// go.work's order puts the command first; the layers put it last.
		"go.work":            "go 1.26.0\n\nuse (\n\t./cmd/x\n\t./console\n\t.\n\t./transport/b\n\t./transport/a\n\t./bench\n)\n",
		"go.mod":             gomod("m.test/r"),
		"transport/a/go.mod": gomod("m.test/r/transport/a", "m.test/r", "golang.org/x/sync"),
		"transport/b/go.mod": gomod("m.test/r/transport/b", "m.test/r"),
		"console/go.mod":     gomod("m.test/r/console", "m.test/r", "m.test/r/transport/a"),
		"cmd/x/go.mod":       gomod("m.test/r/cmd/x", "m.test/r/console", "m.test/r/transport/b", "m.test/r"),
		"bench/go.mod":       "// babelqueue:unpublished: benchmarks.\n" + gomod("m.test/r/bench", "m.test/r/transport/a"),
	})
	ws, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ws.Published()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(pub), ". transport/b transport/a console cmd/x"; got != want {
		t.Errorf("Published = %q, want %q", got, want)
	}
	if got := paths(ws.Unpublished()); got != "bench" {
		t.Errorf("Unpublished = %q", got)
	}
	if m := ws.Module("m.test/r/console"); strings.Join(m.Siblings, " ") != "m.test/r m.test/r/transport/a" {
		t.Errorf("console's siblings = %q (golang.org/x/sync is not one)", m.Siblings)
	}
	if m := ws.Module("m.test/r/transport/a"); m.Go != "1.26.0" || m.Tag("v0.3.0") != "transport/a/v0.3.0" {
		t.Errorf("transport/a: go %q, tag %q", m.Go, m.Tag("v0.3.0"))
	}
	if tag := ws.RootModule().Tag("v0.3.0"); tag != "v0.3.0" {
		t.Errorf("root tag = %q", tag)
	}
}

func TestPublishedRefuses(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"cycle": {
			"go.work":  "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./b\n)\n",
			"go.mod":   gomod("m.test/r"),
			"a/go.mod": gomod("m.test/r/a", "m.test/r/b"),
			"b/go.mod": gomod("m.test/r/b", "m.test/r/a"),
		},
		"requires an unpublished module": {
			"go.work":    "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./dev\n)\n",
			"go.mod":     gomod("m.test/r"),
			"a/go.mod":   gomod("m.test/r/a", "m.test/r/dev"),
			"dev/go.mod": "// babelqueue:unpublished\n" + gomod("m.test/r/dev"),
		},
	} {
		t.Run(name, func(t *testing.T) {
			ws, err := Load(writeTree(t, files))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ws.Published(); err == nil {
				t.Error("no error")
			}
		})
	}
	if _, err := Load(writeTree(t, map[string]string{"go.work": "go 1.26.0\n\nuse ../elsewhere\n"})); err == nil {
		t.Error("a module outside the repository: no error")
	}
}

func TestVersionOfTag(t *testing.T) {
	root, redis := &Module{Dir: "."}, &Module{Dir: "transport/redis"}
	for _, c := range []struct {
		m    *Module
		tag  string
		want string
	}{
		{root, "v0.3.0", "v0.3.0"},
		{root, "v0.3.0-rc.1", "v0.3.0-rc.1"},
		{root, "transport/redis/v0.3.0", ""},
		{root, "v0.3", ""},
		{root, "release-1", ""},
		{redis, "transport/redis/v0.3.0", "v0.3.0"},
		{redis, "v0.3.0", ""},
		{redis, "transport/redis/x/v0.3.0", ""},
	} {
		if got := c.m.VersionOfTag(c.tag); got != c.want {
			t.Errorf("%s: VersionOfTag(%q) = %q, want %q", c.m.Dir, c.tag, got, c.want)
		}
	}
}
