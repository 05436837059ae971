package envelope

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
)

// pyResult is one line of scripts/py/poison_diff.py.
type pyResult struct {
	Name    string  `json:"name"`
	Poison  *string `json:"poison"`
	Accepts *bool   `json:"accepts"`
	URN     *string `json:"urn"`
	DLQ     *string `json:"dlq"`
	Retry   *string `json:"retry"`
	Raised  *string `json:"raised"`
}

// Aspects of a body on which Go and Python are compared.
const (
	aspectVerdict = "verdict" // poison or not; Accepts and the URN of a body that decodes
	aspectDLQ     = "dlq"     // the dead-letter body (poison, or failed with max_attempts 1)
	aspectRetry   = "retry"   // the body re-published for a retry
)

// allowedDiff is a difference from the Python SDK that we keep on purpose.
type allowedDiff struct {
	aspects []string
	why     string
}

// Reasons shared by several bodies.
const (
	whyByteEdit = "SPEC §1: a retry or dead-letter write changes only attempts / appends dead_letter; " +
		"every other byte is kept as received. Python re-encodes the decoded dict instead " +
		"(folds urn into job, collapses duplicate keys, unescapes keys and strings, drops white space)."
	whyDepth = "SPEC §2 / seed: nesting deeper than 10000 is poison for Go; Python's limit is its " +
		"recursion limit (~1000, less the frames in use), and its memory runtime writes nothing to " +
		"the DLQ for such a body (it is logged and dropped)."
	whyRawData = "SPEC §1 and issue 2: data is kept raw so 1e400 and integers beyond 2^53 stay as " +
		"written; Python (mirroring the old Go reference's float64 decode) calls a data number " +
		"that is not a finite double poison."
)

// allowedDiffs lists every body on which we differ from babelqueue 1.24.0.
// Any other difference fails, and so does an entry that no longer differs.
var allowedDiffs = map[string]allowedDiff{
	// Python re-encodes where we edit bytes.
	"urn-alias":             {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"job-and-urn":           {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"urn-then-job":          {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"job-number-urn-string": {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"job-blank-urn-string":  {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"dup-job-last-good":     {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"escaped-job-key":       {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"leading-trailing-ws":   {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"dup-attempts-good":     {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"surrogate-pair":        {[]string{aspectDLQ, aspectRetry}, whyByteEdit},
	"huge-number-unknown": {[]string{aspectDLQ, aspectRetry}, whyByteEdit +
		" Python even writes 1e400 back as the non-JSON literal Infinity."},
	"lone-surrogate-in-data": {[]string{aspectDLQ, aspectRetry}, whyByteEdit +
		" Python writes the lone surrogate as a raw code point, which is not UTF-8."},
	"attempts-int64-max": {[]string{aspectDLQ}, "attempts is an int64 on the wire (SPEC §2 typed " +
		"members); Go saturates at 2^63-1 where Python writes 2^63, a value its own decoder calls poison."},
	"attempts-null": {[]string{aspectDLQ}, "SPEC §2: receiving a body never raises. attempts null " +
		"decodes as 0 in both, but Python's runtime raises TypeError on it and writes nothing."},
	"identity-less-trailing-ws": {[]string{aspectDLQ}, "seed: a spliced body keeps every original " +
		"character; Python drops the white space after the closing brace, Go keeps it."},
	"huge-numbers-in-data":    {[]string{aspectVerdict, aspectDLQ}, whyRawData},
	"deep-1001":               {[]string{aspectVerdict, aspectDLQ}, whyDepth},
	"deep-10000":              {[]string{aspectVerdict, aspectDLQ}, whyDepth},
	"deep-array-unterminated": {[]string{aspectDLQ}, whyDepth},
	"identity-less-deep-998":  {[]string{aspectDLQ}, whyDepth},
	"deep-10001":              {[]string{aspectDLQ}, whyDepth},
	"deep-objects-10001":      {[]string{aspectDLQ}, whyDepth},
}

// splitDeadLetter cuts a dead-letter body into the bytes before the
// appended dead_letter block, the block's members (with the
// language-specific error, exception and lang values blanked) and the bytes
// after it.
func splitDeadLetter(b []byte) (string, error) {
	const mark = `"dead_letter":{"reason":`
	i := bytes.LastIndex(b, []byte(mark))
	if i < 0 {
		return "", fmt.Errorf("no dead_letter block in %q", b)
	}
	start := i + len(`"dead_letter":`)
	dec := json.NewDecoder(bytes.NewReader(b[start:]))
	dec.UseNumber()
	var parts []string
	if _, err := dec.Token(); err != nil {
		return "", err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", err
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", err
		}
		switch k {
		case "error", "exception":
			if v != nil {
				v = "<text>"
			}
		case "lang":
			v = "<lang>"
		}
		parts = append(parts, fmt.Sprintf("%v=%v", k, v))
	}
	if _, err := dec.Token(); err != nil {
		return "", err
	}
	end := start + int(dec.InputOffset())
	return fmt.Sprintf("%s|%s|%s", b[:i], strings.Join(parts, ","), b[end:]), nil
}

func b64s(s *string) []byte {
	if s == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if err != nil {
		panic(err)
	}
	return b
}

// TestDifferentialPython runs the hostile table through the Python SDK and
// compares verdicts, dead-letter bodies and retry bodies. Differences must
// be listed in allowedDiffs.
func TestDifferentialPython(t *testing.T) {
	script := pyinterop.Script(t, "poison_diff.py")
	var in bytes.Buffer
	for _, c := range hostileCases {
		line, _ := json.Marshal(map[string]string{"name": c.name, "b64": base64.StdEncoding.EncodeToString([]byte(c.body))})
		in.Write(append(line, '\n'))
	}
	out := pyinterop.Run(t, 5*time.Minute, in.Bytes(), script)
	results := map[string]pyResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var r pyResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line from python: %v: %q", err, sc.Text())
		}
		results[r.Name] = r
	}
	for name := range allowedDiffs {
		found := false
		for _, c := range hostileCases {
			found = found || c.name == name
		}
		if !found {
			t.Errorf("allowedDiffs names %q, which is not in the hostile table", name)
		}
	}
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			py, ok := results[c.name]
			if !ok {
				t.Fatal("no python result")
			}
			body := []byte(c.body)
			diffs := map[string]string{}

			// Verdict.
			env, err := Decode(body)
			goV := "poison"
			if err == nil {
				goV = fmt.Sprintf("ok accepts=%v urn=%q", env.Accepts() == nil, env.Job)
			}
			pyV := "poison"
			if py.Poison == nil {
				pyV = fmt.Sprintf("ok accepts=%v urn=%q", py.Accepts != nil && *py.Accepts, deref(py.URN))
			}
			if goV != pyV {
				diffs[aspectVerdict] = fmt.Sprintf("go %s, python %s (%s)", goV, pyV, deref(py.Poison))
			}

			// Dead-letter body.
			goDL, err := deadLetterFor(body, "orders")
			if err != nil {
				t.Fatal(err)
			}
			// The runtime dead-letters a failing body only once attempts+1 reaches
			// max_attempts (1 here); below that it retries.
			if env != nil && env.Attempts+1 < 1 {
				goDL = nil
			}
			if py.DLQ == nil && goDL == nil {
				// both wrote nothing
			} else if py.DLQ == nil {
				diffs[aspectDLQ] = fmt.Sprintf("python wrote no dead-letter body (raised: %s)", deref(py.Raised))
			} else {
				g, err1 := splitDeadLetter(goDL)
				p, err2 := splitDeadLetter(b64s(py.DLQ))
				if err1 != nil || err2 != nil || g != p {
					diffs[aspectDLQ] = fmt.Sprintf("\n go %q\npy  %q (%v %v)", clip(g), clip(p), err1, err2)
				}
			}

			// Retry body (max_attempts 2): only for bodies that decode in Python.
			if py.Poison == nil && py.Raised == nil {
				var goRetry []byte
				if env != nil && env.Attempts+1 < 2 { // max_attempts 2
					goRetry, _ = SetAttempts(body, env.Attempts+1)
				}
				if !bytes.Equal(goRetry, b64s(py.Retry)) {
					diffs[aspectRetry] = fmt.Sprintf("\n go %q\npy  %q", clip(string(goRetry)), clip(string(b64s(py.Retry))))
				}
			}

			allowed := map[string]bool{}
			ad, listed := allowedDiffs[c.name]
			for _, a := range ad.aspects {
				allowed[a] = true
			}
			var aspects []string
			for a := range diffs {
				aspects = append(aspects, a)
			}
			sort.Strings(aspects)
			for _, a := range aspects {
				if !allowed[a] {
					t.Errorf("unexpected difference from Python in %s: %s", a, diffs[a])
				} else {
					t.Logf("allowed difference in %s (%s): %s", a, ad.why, clip(diffs[a]))
				}
			}
			for a := range allowed {
				if _, ok := diffs[a]; !ok {
					t.Errorf("allowedDiffs lists %s for this body but Go and Python now agree: remove it", a)
				}
			}
			_ = listed
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func clip(s string) string {
	if len(s) > 600 {
		return s[:300] + "…" + s[len(s)-300:]
	}
	return s
}
