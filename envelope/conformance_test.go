package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestConformanceCases runs every "cases" entry of the shared conformance
// manifest: valid fixtures decode, are accepted and match their expect
// block; invalid ones are poison or not accepted.
func TestConformanceCases(t *testing.T) {
	dir := conformanceDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Cases []struct {
			Name   string `json:"name"`
			File   string `json:"file"`
			Valid  bool   `json:"valid"`
			Reason string `json:"reason"`
			Expect *struct {
				URN           string          `json:"urn"`
				Data          json.RawMessage `json:"data"`
				Attempts      int             `json:"attempts"`
				Lang          string          `json:"lang"`
				SchemaVersion int             `json:"schema_version"`
				DeadLetter    map[string]any  `json:"dead_letter"`
			} `json:"expect"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Cases) == 0 {
		t.Fatal("manifest has no cases")
	}
	for _, c := range manifest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(dir, c.File))
			if err != nil {
				t.Fatal(err)
			}
			env, err := Decode(body)
			if !c.Valid {
				if err != nil {
					if !errors.Is(err, ErrPoison) {
						t.Fatalf("rejection %v does not match ErrPoison", err)
					}
					t.Logf("rejected as poison: %v (%s)", err, c.Reason)
					return
				}
				if acc := env.Accepts(); acc == nil {
					t.Fatalf("invalid case accepted (%s)", c.Reason)
				} else {
					t.Logf("rejected by Accepts: %v (%s)", acc, c.Reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if err := env.Accepts(); err != nil {
				t.Fatalf("Accepts: %v", err)
			}
			if !bytes.Equal(env.Raw(), body) {
				t.Fatal("Raw differs from the fixture bytes")
			}
			e := c.Expect
			if e == nil {
				t.Fatal("valid case without expect")
			}
			if env.Job != e.URN {
				t.Errorf("Job = %q, want %q", env.Job, e.URN)
			}
			if env.Attempts != e.Attempts {
				t.Errorf("Attempts = %d, want %d", env.Attempts, e.Attempts)
			}
			if env.Meta.Lang != e.Lang {
				t.Errorf("Meta.Lang = %q, want %q", env.Meta.Lang, e.Lang)
			}
			if env.Meta.SchemaVersion != e.SchemaVersion {
				t.Errorf("Meta.SchemaVersion = %d, want %d", env.Meta.SchemaVersion, e.SchemaVersion)
			}
			var got, want any
			if err := json.Unmarshal(env.Data, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(e.Data, &want); err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(got, want) {
				t.Errorf("Data = %s, want %s", env.Data, e.Data)
			}
			if e.DeadLetter == nil {
				if env.DeadLetter != nil {
					t.Errorf("unexpected DeadLetter %+v", env.DeadLetter)
				}
			} else {
				if env.DeadLetter == nil {
					t.Fatal("DeadLetter missing")
				}
				if r, ok := e.DeadLetter["reason"]; ok && r != env.DeadLetter.Reason {
					t.Errorf("DeadLetter.Reason = %q, want %v", env.DeadLetter.Reason, r)
				}
				if q, ok := e.DeadLetter["original_queue"]; ok && q != env.DeadLetter.OriginalQueue {
					t.Errorf("DeadLetter.OriginalQueue = %q, want %v", env.DeadLetter.OriginalQueue, q)
				}
			}
			// The runtime's byte edits keep every other byte of the fixture.
			b, err := SetAttempts(body, env.Attempts+1)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Decode(b)
			if err != nil || again.Attempts != env.Attempts+1 || !bytes.Equal(again.Data, env.Data) {
				t.Fatalf("SetAttempts round trip: %v", err)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
