package envelope

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// repoRoot walks up from the package directory to the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// conformanceDir is $BQ_CONFORMANCE_DIR, else <repo>/../shared/conformance.
// A missing directory fails the test under CI=true and skips it elsewhere.
func conformanceDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BQ_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "..", "shared", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		msg := "conformance data not found at " + dir + ": set BQ_CONFORMANCE_DIR to the directory holding manifest.json (default ../shared/conformance from the repo root)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: this test never skips)")
		}
		t.Skip(msg)
	}
	return dir
}

// deadLetterFor is what the runtime writes to the DLQ for body when its
// handler fails on the first attempt (max_attempts 1) or when it is poison.
func deadLetterFor(body []byte, queue string) ([]byte, error) {
	env, err := Decode(body)
	if err != nil {
		att, _ := PeekAttempts(body)
		return PoisonBody(body, PoisonDeadLetter(err, queue, att, failedAtMs)), nil
	}
	n := env.Attempts
	if n < math.MaxInt { // saturate instead of wrapping to a negative count
		n++
	}
	b, err := SetAttempts(body, n)
	if err != nil {
		return nil, err
	}
	msg, exc := "boom", "RuntimeError"
	return AppendDeadLetter(b, DeadLetter{Reason: ReasonFailed, Error: &msg, Exception: &exc,
		FailedAt: failedAtMs, OriginalQueue: queue, Attempts: n, Lang: Lang})
}

// checkPoisonBodyInvariants checks the fuzz/table invariants of a poison
// dead-letter body: valid JSON; a splice keeps every byte before the
// original closing brace (and after it); a wrap gives the exact body back.
func checkPoisonBodyInvariants(t testing.TB, body, out []byte) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("dead-letter body is not valid JSON: %q", out)
	}
	if !utf8.Valid(out) {
		t.Fatalf("dead-letter body is not UTF-8: %q", out)
	}
	// A splice: body[:close] is a prefix of out and body[close:] a suffix.
	if end := len(bytes.TrimRight(body, " \t\r\n")) - 1; end >= 0 && body[end] == '}' &&
		bytes.HasPrefix(out, body[:end]) && bytes.HasSuffix(out, body[end:]) && len(out) > len(body) {
		return
	}
	// Otherwise a wrap that gives the exact body back.
	var wrap struct {
		Raw         *string         `json:"raw"`
		RawEncoding string          `json:"raw_encoding"`
		DeadLetter  json.RawMessage `json:"dead_letter"`
	}
	if err := json.Unmarshal(out, &wrap); err != nil || wrap.Raw == nil || len(wrap.DeadLetter) == 0 {
		t.Fatalf("neither a splice nor a wrap: %v %q", err, out)
	}
	got := []byte(*wrap.Raw)
	if wrap.RawEncoding == "base64" {
		if utf8.Valid(body) {
			t.Fatalf("valid UTF-8 body wrapped as base64")
		}
		var err error
		if got, err = base64.StdEncoding.DecodeString(*wrap.Raw); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("wrap does not give the body back:\n got %q\nwant %q", got, body)
	}
}
