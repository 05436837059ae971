// Package pyinterop finds and runs the Python SDK (babelqueue==1.24.0) that the
// interop and differential tests use as their peer, and finds the cross-SDK
// conformance data. scripts/pyenv.sh creates the peer's virtual environment; tests
// never install anything themselves.
package pyinterop

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RepoRoot returns the repository root: the directory holding go.work, found by walking
// up from the working directory of the test (each module's tests run in that module's
// directory), else the nearest directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	nearest := ""
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && nearest == "" {
			nearest = dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			if nearest == "" {
				t.Fatal("pyinterop: no go.work or go.mod above the working directory")
			}
			return nearest
		}
		dir = parent
	}
}

// ConformanceDir returns the directory of the cross-SDK conformance data:
// $BQ_CONFORMANCE_DIR, else ../shared/conformance beside the repository root. When it
// holds no manifest.json the test fails under CI=true and is skipped elsewhere, with a
// message saying how to point the tests at the data.
func ConformanceDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BQ_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "..", "shared", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		msg := "conformance data not found at " + dir + ": set BQ_CONFORMANCE_DIR to the directory holding manifest.json (default ../shared/conformance from the repository root)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: conformance tests never skip)")
		}
		t.Skip(msg)
	}
	return dir
}

// Python returns the interpreter of the virtual environment: $BQ_PYTHON, else
// <repo>/.cache/pyenv/bin/python. When it is missing the test fails under CI=true and
// is skipped elsewhere, with the command that creates it.
func Python(t testing.TB) string {
	t.Helper()
	py := os.Getenv("BQ_PYTHON")
	if py == "" {
		py = filepath.Join(RepoRoot(t), ".cache", "pyenv", "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		msg := "python SDK peer not installed at " + py + ": run scripts/pyenv.sh (or set BQ_PYTHON)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: interop tests never skip)")
		}
		t.Skip(msg)
	}
	return py
}

// Script returns the path of a helper script in scripts/py.
func Script(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "scripts", "py", name)
}

// Run runs the Python script with args and stdin, failing the test on a non-zero exit
// (its stderr is shown), and returns stdout.
func Run(t testing.TB, timeout time.Duration, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Python(t), append([]string{script}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("python %s %v: %v\nstderr:\n%s", filepath.Base(script), args, err, errb.String())
	}
	return out.Bytes()
}

// Start starts the Python script in the background and returns the command; the test's
// cleanup kills it if it is still running.
func Start(t testing.TB, script string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(Python(t), append([]string{script}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &out
}
