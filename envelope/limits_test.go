package envelope

import (
	"math"
	"strings"
	"testing"
)

// The byte edits take a counter at its maximum (issue 22: attempts+1 used to overflow,
// the settle write could not be built and the runtime rewound the delivery for ever).
func TestEditsAtMaxInt(t *testing.T) {
	body := []byte(`{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":9223372036854775806}`)
	got, err := SetAttempts(body, math.MaxInt)
	if err != nil {
		t.Fatalf("SetAttempts(MaxInt): %v", err)
	}
	if !strings.HasSuffix(string(got), `"attempts":9223372036854775807}`) {
		t.Fatalf("SetAttempts(MaxInt) = %s", got)
	}
	env, err := Decode(got)
	if err != nil || env.Attempts != math.MaxInt {
		t.Fatalf("the edited body decodes to attempts %v (%v), want MaxInt", env, err)
	}
	dl, err := AppendDeadLetter(got, DeadLetter{Reason: ReasonFailed, FailedAt: failedAtMs, OriginalQueue: "q", Attempts: math.MaxInt})
	if err != nil {
		t.Fatalf("AppendDeadLetter(attempts MaxInt): %v", err)
	}
	if !strings.Contains(string(dl), `"original_queue":"q","attempts":9223372036854775807,"lang":"go"}}`) {
		t.Fatalf("dead-letter block = %s", dl)
	}
	if _, err := Decode(dl); err != nil {
		t.Fatalf("the dead-lettered body no longer decodes: %v", err)
	}
	if _, err := SetAttempts(body, -1); err == nil {
		t.Fatal("SetAttempts(-1) wrote a negative counter")
	}
	if n, ok := PeekAttempts(got); !ok || n != math.MaxInt {
		t.Fatalf("PeekAttempts = %d, %v", n, ok)
	}
}
