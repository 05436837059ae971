package envelope

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"

	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
)

// conformanceDir is $BQ_CONFORMANCE_DIR, else <repo>/../shared/conformance; see
// [pyinterop.ConformanceDir].
func conformanceDir(t testing.TB) string {
	t.Helper()
	return pyinterop.ConformanceDir(t)
}

// deadLetterFor is what the runtime writes to the DLQ for body when its
// handler fails on the first attempt (max_attempts 1) or when it is poison.
func deadLetterFor(body []byte, queue string) ([]byte, error) {
	env, err := Decode(body)
	if err != nil {
		att, _ := PeekAttempts(body)
		att = max(att, 0) // a negative count is 0, in the runtime and in Python
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
