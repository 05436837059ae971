package envelope

import (
	"bytes"
	"errors"
	"testing"
)

func addSeeds(f *testing.F) {
	for _, c := range hostileCases {
		if len(c.body) <= 4096 {
			f.Add([]byte(c.body))
		}
	}
}

// FuzzDecode: Decode never panics; a poison verdict is a *PoisonError; a
// body that decodes keeps its bytes and survives the byte-level edits.
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		env, err := Decode(body)
		if !bytes.Equal(body, orig) {
			t.Fatal("Decode modified its input")
		}
		if err != nil {
			var pe *PoisonError
			if env != nil || !errors.As(err, &pe) || !errors.Is(err, ErrPoison) || pe.Reason == "" {
				t.Fatalf("bad poison result %v %v", env, err)
			}
			return
		}
		if env.Job == "" || !bytes.Equal(env.Raw(), body) {
			t.Fatal("decoded envelope lost its identity or bytes")
		}
		_ = env.Accepts()
		b, err := SetAttempts(body, env.Attempts+1)
		if env.Attempts+1 > 0 {
			if err != nil {
				t.Fatalf("SetAttempts: %v", err)
			}
			again, err := Decode(b)
			if err != nil || again.Attempts != env.Attempts+1 || again.Job != env.Job {
				t.Fatalf("SetAttempts broke the envelope: %v %q", err, b)
			}
			if n, ok := PeekAttempts(b); !ok || n != env.Attempts+1 {
				t.Fatalf("PeekAttempts = %d %v", n, ok)
			}
		}
		msg := "e"
		dl, err := AppendDeadLetter(body, DeadLetter{Reason: ReasonFailed, Error: &msg, OriginalQueue: "q", Attempts: 1})
		if err != nil {
			t.Fatalf("AppendDeadLetter: %v", err)
		}
		again, err := Decode(dl)
		if err != nil || again.DeadLetter == nil || again.DeadLetter.Reason != ReasonFailed || again.Job != env.Job {
			t.Fatalf("AppendDeadLetter broke the envelope: %v %q", err, dl)
		}
	})
}

// FuzzPoisonBody: PoisonBody never panics, always gives valid JSON; a splice
// keeps the original bytes around its insertion, a wrap gives the exact
// original bytes back.
func FuzzPoisonBody(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		out := PoisonBody(body, DeadLetter{OriginalQueue: "q\"<>", Attempts: 2, FailedAt: failedAtMs})
		checkPoisonBodyInvariants(t, body, out)
	})
}
