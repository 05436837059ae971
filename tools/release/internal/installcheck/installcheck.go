// Package installcheck installs a release the way a user does, from a module proxy,
// in scratch modules outside the repository (GOWORK=off): it "go get"s the modules the
// README's quick start imports at the version and builds the quick start, "go install"s
// every command module at the version and runs its "version" subcommand, and counts
// the modules ("go list -m all") of a program that imports the root package and one
// broker, for each broker. A go.mod that still needs a replace directive fails it: the
// go command ignores a dependency's replace directives, so the placeholder version a
// replace stood for is looked up on the proxy, which does not have it.
package installcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/tools/release/internal/goenv"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/relstate"
	"github.com/babelqueue-go/babelqueue/tools/release/internal/workspace"
)

// Config is what Run needs.
type Config struct {
	// Env runs the go commands (its GOPROXY starts with the proxy holding the release).
	Env *goenv.Env
	// Dir is a scratch directory for the user modules.
	Dir string
	// Version installed.
	Version string
	// Modules are the released modules.
	Modules []*workspace.Module
	// QuickStart is the Go source of the README's quick start.
	QuickStart []byte
	// SeedSums, when set, starts every scratch go.sum (the checksum database cannot
	// be reached: these are the sums the repository recorded).
	SeedSums []byte
	// Log receives progress.
	Log io.Writer
}

// Result is what a user gets.
type Result struct {
	// Counts maps a broker name ("none" for the root alone, else the base name of the
	// broker module's directory) to "go list -m all | wc -l" of a program that imports
	// the root package and that broker.
	Counts map[string]int
	// Commands maps each command module path to its "version" output.
	Commands map[string]string
	// Durations of the three parts.
	QuickStart, Install, Count time.Duration
}

// Brokers returns the broker modules among mods: those in a directory transport/<name>.
func Brokers(mods []*workspace.Module) []*workspace.Module {
	var out []*workspace.Module
	for _, m := range mods {
		if dir, name := path.Split(m.Dir); dir == "transport/" && name != "" {
			out = append(out, m)
		}
	}
	return out
}

// Commands returns the command modules among mods: those in a directory cmd/<name>.
func Commands(mods []*workspace.Module) []*workspace.Module {
	var out []*workspace.Module
	for _, m := range mods {
		if dir, name := path.Split(m.Dir); dir == "cmd/" && name != "" {
			out = append(out, m)
		}
	}
	return out
}

// Run installs the release. Each failure says which user step failed and the go
// command's output.
func Run(ctx context.Context, c Config) (*Result, error) {
	res := &Result{Counts: map[string]int{}, Commands: map[string]string{}}
	root := rootOf(c.Modules)
	if root == nil {
		return nil, fmt.Errorf("installcheck: the root module is not among the released modules")
	}

	// 0. Every released go.mod, as the proxy serves it: no replace directive, every
	// sibling at the version. (A user's build ignores a dependency's replace
	// directives, and "go install pkg@version" refuses a module that has one.)
	if err := c.checkGoMods(ctx); err != nil {
		return nil, err
	}

	// 1. The quick start, as a user writes it after "go get" of what it imports.
	start := time.Now()
	imports, err := importsOf(c.QuickStart)
	if err != nil {
		return nil, fmt.Errorf("installcheck: the README quick start: %w", err)
	}
	var get []string
	for _, p := range imports {
		if m := moduleOf(c.Modules, p); m != nil && !slices.Contains(get, m.Path+"@"+c.Version) {
			get = append(get, m.Path+"@"+c.Version)
		}
	}
	if len(get) == 0 {
		return nil, fmt.Errorf("installcheck: the README quick start imports none of the released modules")
	}
	dir, err := c.userModule("quickstart", map[string][]byte{"main.go": c.QuickStart})
	if err != nil {
		return nil, err
	}
	if _, err := c.Env.Go(ctx, dir, append([]string{"get"}, get...)...); err != nil {
		return nil, fmt.Errorf("installcheck: go get of the quick start's modules: %w", err)
	}
	// Built as the user builds it: -mod=readonly (the default), so "go get" must
	// have left a go.mod and go.sum that build.
	if _, err := c.Env.Go(ctx, dir, "build", "-o", filepath.Join(dir, "quickstart"), "."); err != nil {
		return nil, fmt.Errorf("installcheck: go build of the README quick start: %w", err)
	}
	res.QuickStart = time.Since(start)
	c.printf("  quick start: go get %s; go build: ok (%.1fs)\n", strings.Join(get, " "), res.QuickStart.Seconds())

	// 2. Every command, installed by version and run.
	start = time.Now()
	for _, m := range Commands(c.Modules) {
		if _, err := c.Env.Go(ctx, c.Dir, "install", m.Path+"@"+c.Version); err != nil {
			return nil, fmt.Errorf("installcheck: go install %s@%s: %w", m.Path, c.Version, err)
		}
		bin := filepath.Join(c.Env.Bin, path.Base(m.Path))
		out, err := c.Env.Run(ctx, c.Dir, bin, "version")
		if err != nil {
			return nil, fmt.Errorf("installcheck: %s version: %w", path.Base(m.Path), err)
		}
		if !strings.Contains(out, strings.TrimPrefix(c.Version, "v")) {
			return nil, fmt.Errorf("installcheck: %s version printed %q, which does not name %s", path.Base(m.Path), strings.TrimSpace(out), c.Version)
		}
		res.Commands[m.Path] = strings.TrimSpace(out)
		c.printf("  go install %s@%s; %s version: %s (%.1fs)\n", m.Path, c.Version, path.Base(m.Path), firstLine(out), time.Since(start).Seconds())
	}
	res.Install = time.Since(start)

	// 3. What one broker costs a program: its module graph.
	start = time.Now()
	targets := []*workspace.Module{nil}
	targets = append(targets, Brokers(c.Modules)...)
	for _, b := range targets {
		// A broker's program gets the broker alone: the root comes at the version the
		// broker's go.mod requires, as it does for a user who only adds a broker.
		name, get, src := "none", []string{root.Path + "@" + c.Version}, "package main\n\nimport _ \""+root.Path+"\"\n\nfunc main() {}\n"
		if b != nil {
			name = path.Base(b.Dir)
			get = []string{b.Path + "@" + c.Version}
			src = "package main\n\nimport (\n\t_ \"" + root.Path + "\"\n\t_ \"" + b.Path + "\"\n)\n\nfunc main() {}\n"
		}
		dir, err := c.userModule("count-"+name, map[string][]byte{"main.go": []byte(src)})
		if err != nil {
			return nil, err
		}
		if _, err := c.Env.Go(ctx, dir, append([]string{"get"}, get...)...); err != nil {
			return nil, fmt.Errorf("installcheck: go get %s: %w", strings.Join(get, " "), err)
		}
		if _, err := c.Env.Go(ctx, dir, "mod", "tidy"); err != nil {
			return nil, fmt.Errorf("installcheck: go mod tidy (%s): %w", name, err)
		}
		out, err := c.Env.Go(ctx, dir, "list", "-m", "all")
		if err != nil {
			return nil, fmt.Errorf("installcheck: go list -m all (%s): %w", name, err)
		}
		res.Counts[name] = countLines(out)
	}
	res.Count = time.Since(start)
	c.printf("  go list -m all | wc -l of a program importing the root and one broker: %s (%.1fs)\n", FormatCounts(res.Counts), res.Count.Seconds())
	return res, nil
}

// checkGoMods downloads the go.mod of every released module from the proxy and
// checks it can be installed by version.
func (c *Config) checkGoMods(ctx context.Context) error {
	dir, err := c.userModule("gomods", map[string][]byte{})
	if err != nil {
		return err
	}
	args := []string{"mod", "download", "-json"}
	siblings := map[string]bool{}
	for _, m := range c.Modules {
		args = append(args, m.Path+"@"+c.Version)
		siblings[m.Path] = true
	}
	out, err := c.Env.Go(ctx, dir, args...)
	if err != nil {
		return fmt.Errorf("installcheck: go mod download of the released modules: %w", err)
	}
	var errs []error
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var d struct{ Path, Version, GoMod, Error string }
		if err := dec.Decode(&d); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("installcheck: go mod download -json: %w", err)
		}
		if d.Error != "" {
			errs = append(errs, fmt.Errorf("%s@%s: %s", d.Path, d.Version, d.Error))
			continue
		}
		data, err := os.ReadFile(d.GoMod)
		if err != nil {
			return err
		}
		if err := relstate.CheckPublishable(d.Path+"@"+d.Version+"/go.mod", data, siblings, c.Version); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("installcheck: a released go.mod cannot be installed by version: %w", errors.Join(errs...))
	}
	c.printf("  go mod download of %d modules: every go.mod requires its siblings at %s, no replace\n", len(c.Modules), c.Version)
	return nil
}

func countLines(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// FormatCounts prints counts as "none 2, amqp 5, ...", none first, then by name.
func FormatCounts(counts map[string]int) string {
	var names []string
	for n := range counts {
		if n != "none" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if _, ok := counts["none"]; ok {
		names = append([]string{"none"}, names...)
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, counts[n]))
	}
	return strings.Join(parts, ", ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func (c *Config) printf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format, args...)
	}
}

// userModule makes a module example.com/<name> in a directory of its own, outside
// the repository, with the files given.
func (c *Config) userModule(name string, files map[string][]byte) (string, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files["go.mod"] = []byte("module example.com/" + name + "\n\ngo 1.26\n")
	if len(c.SeedSums) > 0 {
		files["go.sum"] = c.SeedSums
	}
	for n, data := range files {
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func rootOf(mods []*workspace.Module) *workspace.Module {
	for _, m := range mods {
		if m.Dir == "." {
			return m
		}
	}
	return nil
}

// moduleOf returns the released module that provides package p: the one with the
// longest module path that is p or a prefix of it.
func moduleOf(mods []*workspace.Module, p string) *workspace.Module {
	var best *workspace.Module
	for _, m := range mods {
		if (p == m.Path || strings.HasPrefix(p, m.Path+"/")) && (best == nil || len(m.Path) > len(best.Path)) {
			best = m
		}
	}
	return best
}

func importsOf(src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
