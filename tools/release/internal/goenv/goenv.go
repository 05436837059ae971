// Package goenv runs the go command the way a user outside the repository runs it:
// no workspace (GOWORK=off), the released modules from a local file proxy, every
// third-party module from the module cache or the public module proxy, and a module
// cache of its own, so that nothing released locally ever reaches the user's cache.
//
// The environment it builds:
//
//	GOPROXY    file://<local proxy>,file://<GOMODCACHE>/cache/download,<public proxies>
//	GONOSUMDB  the repository's module path: our versions are not in the checksum
//	           database, third-party ones are checked against it as usual
//	GONOPROXY, GOPRIVATE  empty: GOPRIVATE would also set GONOPROXY for our path, and
//	           the go command would then skip every proxy, the local one included, and
//	           fetch from the repository host directly
//	GOMODCACHE a scratch directory (removed with the scratch tree)
//	GOFLAGS    -modcacherw -trimpath (the scratch cache can be removed; compiled
//	           packages do not depend on where the cache is, so the build cache is
//	           reused from one run to the next)
//
// The checksum database is used when it can be reached (directly or through the
// public proxy, which serves it); otherwise GOSUMDB=off, and the checks seed each
// scratch module's go.sum with the sums the repository's own go.sum files recorded.
package goenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Env is the environment of the go commands a check runs.
type Env struct {
	// GOPROXY, GONOSUMDB, GOSUMDB, GOMODCACHE and GOBIN as set.
	Proxy, NoSumDB, SumDB, ModCache, Bin string
	// SumDBReachable tells whether third-party modules are checked against the
	// checksum database (SumDB is then the user's) or only against go.sum lines.
	SumDBReachable bool
	// Log, when set, receives every command run and its duration.
	Log io.Writer
}

// Config is what New needs.
type Config struct {
	// Scratch is a directory New may fill (the module cache and GOBIN go there).
	Scratch string
	// LocalProxy is the file:// URL of the proxy holding the released modules.
	LocalProxy string
	// ModulePrefix is the repository's root module path; its modules skip the
	// checksum database.
	ModulePrefix string
	// PublicProxy overrides the public proxies taken from the user's GOPROXY; "off"
	// uses none (the module cache only).
	PublicProxy string
	// Log as in Env.
	Log io.Writer
}

// New builds the environment, probing whether the checksum database can be reached.
func New(ctx context.Context, c Config) (*Env, error) {
	user, err := goEnv("GOPROXY", "GOSUMDB", "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	public := PublicProxies(user["GOPROXY"])
	if c.PublicProxy != "" {
		public = PublicProxies(c.PublicProxy)
	}
	proxies := []string{c.LocalProxy}
	if mc := user["GOMODCACHE"]; mc != "" {
		proxies = append(proxies, "file://"+filepath.ToSlash(filepath.Join(mc, "cache", "download")))
	}
	proxies = append(proxies, public...)
	if len(public) == 0 {
		// Nothing after the module cache: a module missing there is an error, not a
		// fetch from its repository's host.
		proxies = append(proxies, "off")
	}
	e := &Env{
		Proxy:    strings.Join(proxies, ","),
		NoSumDB:  c.ModulePrefix,
		SumDB:    user["GOSUMDB"],
		ModCache: filepath.Join(c.Scratch, "modcache"),
		Bin:      filepath.Join(c.Scratch, "bin"),
		Log:      c.Log,
	}
	e.SumDBReachable = e.SumDB != "off" && sumDBReachable(ctx, e.SumDB, public)
	if !e.SumDBReachable {
		e.SumDB = "off"
	}
	return e, nil
}

// PublicProxies returns the http(s) entries of a GOPROXY value, in order.
func PublicProxies(goproxy string) []string {
	var out []string
	for _, p := range strings.FieldsFunc(goproxy, func(r rune) bool { return r == ',' || r == '|' }) {
		if strings.HasPrefix(p, "https://") || strings.HasPrefix(p, "http://") {
			out = append(out, strings.TrimSuffix(p, "/"))
		}
	}
	return out
}

func goEnv(names ...string) (map[string]string, error) {
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(names) {
		return nil, fmt.Errorf("go env: unexpected output %q", out)
	}
	m := map[string]string{}
	for i, n := range names {
		m[n] = lines[i]
	}
	return m, nil
}

// sumDBReachable asks each public proxy whether it serves the checksum database, as
// the go command does first, then the database itself.
func sumDBReachable(ctx context.Context, gosumdb string, public []string) bool {
	f := strings.Fields(gosumdb)
	if len(f) == 0 {
		return false
	}
	name := f[0]
	if i := strings.Index(name, "+"); i >= 0 {
		name = name[:i]
	}
	var urls []string
	for _, p := range public {
		urls = append(urls, p+"/sumdb/"+name+"/supported")
	}
	direct := "https://" + name
	if len(f) > 2 {
		direct = strings.TrimSuffix(f[2], "/")
	}
	urls = append(urls, direct+"/latest")
	client := &http.Client{Timeout: 10 * time.Second}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
	}
	return false
}

// Vars returns the environment of a go command run under e: the process's own, less
// every setting e decides.
func (e *Env) Vars() []string {
	drop := []string{"GOWORK", "GOPROXY", "GONOPROXY", "GOPRIVATE", "GONOSUMDB", "GOSUMDB",
		"GOMODCACHE", "GOBIN", "GOFLAGS", "GOTOOLCHAIN", "GOINSECURE", "GO111MODULE"}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, name)
	})
	return append(env,
		"GOWORK=off",
		"GO111MODULE=on",
		"GOPROXY="+e.Proxy,
		"GONOPROXY=",
		"GOPRIVATE=",
		"GOINSECURE=",
		"GONOSUMDB="+e.NoSumDB,
		"GOSUMDB="+e.SumDB,
		"GOMODCACHE="+e.ModCache,
		"GOBIN="+e.Bin,
		"GOFLAGS=-modcacherw -trimpath",
		"GOTOOLCHAIN=local",
	)
}

// Go runs the go command with args in dir and returns its combined output. A failure
// carries that output.
func (e *Env) Go(ctx context.Context, dir string, args ...string) (string, error) {
	return e.Run(ctx, dir, "go", args...)
}

// Run runs a program with e's environment in dir.
func (e *Env) Run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = e.Vars()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if e.Log != nil {
		fmt.Fprintf(e.Log, "    $ %s %s   (in %s, %.1fs)\n", name, strings.Join(args, " "), dir, time.Since(start).Seconds())
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, indent(out.String()))
	}
	return out.String(), nil
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}

// RemoveAll removes a scratch directory, module cache included (its files are
// writable: GOFLAGS has -modcacherw).
func RemoveAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	// A cache written without -modcacherw (an interrupted earlier run) has read-only
	// directories: make them writable and try again.
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
