package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/hostile.golden.json from the current output")

const goldenFile = "testdata/hostile.golden.json"

// goldenValue is the dead-letter bytes as text, or "sha256:<hex>" for a long one.
func goldenValue(b []byte) string {
	if len(b) > 4096 {
		sum := sha256.Sum256(b)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return string(b)
}

// TestHostile runs every body of the hostile table: the exact verdict, the
// exact dead-letter bytes (golden file, fixed failed_at) and the invariants
// of the poison body.
func TestHostile(t *testing.T) {
	if len(hostileCases) < 40 {
		t.Fatalf("hostile table has %d bodies, want at least 40", len(hostileCases))
	}
	golden := map[string]string{}
	if !*update {
		b, err := os.ReadFile(goldenFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &golden); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	got := map[string]string{}
	for _, c := range hostileCases {
		if seen[c.name] {
			t.Fatalf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			env, err := Decode(body)
			if c.reason != "" {
				var pe *PoisonError
				if !errors.As(err, &pe) || !errors.Is(err, ErrPoison) {
					t.Fatalf("Decode = %v, %v; want poison %s", env, err, c.reason)
				}
				if pe.Reason != c.reason {
					t.Fatalf("poison reason %q (%v), want %q", pe.Reason, err, c.reason)
				}
				if env != nil {
					t.Fatal("poison returned an envelope")
				}
				checkPoisonBodyInvariants(t, body, PoisonBody(body, DeadLetter{OriginalQueue: "orders"}))
			} else {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if string(env.Raw()) != c.body {
					t.Fatal("Raw is not the body")
				}
				acc := env.Accepts()
				if (acc == nil) != c.accepts {
					t.Fatalf("Accepts = %v, want accepted=%v", acc, c.accepts)
				}
				if acc != nil && !errors.Is(acc, ErrNotAccepted) {
					t.Fatalf("Accepts error %v does not match ErrNotAccepted", acc)
				}
			}
			dl, err := deadLetterFor(body, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(dl) {
				t.Fatalf("dead-letter body is not valid JSON: %q", dl)
			}
			got[c.name] = goldenValue(dl)
			if !*update && golden[c.name] != got[c.name] {
				t.Errorf("dead-letter bytes\n got %s\nwant %s", got[c.name], golden[c.name])
			}
		})
	}
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
