package transporttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ConformanceDir returns the directory of the cross-SDK conformance data:
// $BQ_CONFORMANCE_DIR, else ../shared/conformance beside the repository root. When it
// holds no manifest.json the test fails under CI=true and is skipped elsewhere, with a
// message saying how to point the tests at the data.
func ConformanceDir(t testing.TB) string {
	t.Helper()
	return pyinterop.ConformanceDir(t)
}

// ManifestBlock decodes the top-level member name of the conformance manifest (a
// broker's block, such as "rabbitmq" or "kafka") into v, and returns the conformance
// directory so fixtures the block names can be read beside it. A missing block fails
// the test.
func ManifestBlock(t testing.TB, name string, v any) string {
	t.Helper()
	dir := ConformanceDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	block, ok := blocks[name]
	if !ok || string(block) == "null" {
		t.Fatalf("manifest.json has no %q block", name)
	}
	if err := json.Unmarshal(block, v); err != nil {
		t.Fatalf("manifest.json, block %q: %v", name, err)
	}
	return dir
}

// Fixture reads a file of the conformance data, such as the envelope a manifest block
// names.
func Fixture(t testing.TB, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("conformance fixture: %v", err)
	}
	return b
}

// FixtureProjection decodes an envelope fixture and returns the projection the runtime
// publishes it with, and its attempts member.
func FixtureProjection(t testing.TB, body []byte) (transport.Projection, int) {
	t.Helper()
	e, err := envelope.Decode(body)
	if err != nil {
		t.Fatalf("fixture is not an envelope: %v", err)
	}
	return transport.ProjectionOf(e), e.Attempts
}

// RunPythonPeer runs scripts/py/<script> with the Python SDK babelqueue==1.24.0 that
// scripts/pyenv.sh installs (the family's reference, the interop tests' peer), with
// stdin and args, and returns what it printed. A peer that cannot be found fails the
// test under CI=true and skips it elsewhere; one that fails or outlives timeout fails it.
func RunPythonPeer(t testing.TB, timeout time.Duration, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	return pyinterop.Run(t, timeout, stdin, pyinterop.Script(t, script), args...)
}
