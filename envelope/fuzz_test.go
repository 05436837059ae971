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
		checkEditsFromSpans(t, env)
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

// checkEditsFromSpans: the bodies of a retry and a dead letter that a decoded envelope
// writes from the spans Decode recorded are the bytes the scanning editors write.
func checkEditsFromSpans(t *testing.T, env *Envelope) {
	t.Helper()
	body := env.Raw()
	for _, n := range []int{env.Attempts, env.Attempts + 1, 0, 12345, -1} {
		want, wantErr := SetAttempts(body, n)
		got, err := env.RetryBody(n)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("RetryBody(%d) = %q, %v; SetAttempts gives %q, %v", n, got, err, want, wantErr)
		}
		msg, typ := "boom \"quoted\" \u2028", "errors.errorString"
		for _, dl := range []DeadLetter{
			{Reason: ReasonFailed, Error: &msg, Exception: &typ, OriginalQueue: "q", Attempts: n, FailedAt: failedAtMs},
			{Reason: ReasonUnknownURN, OriginalQueue: "orders\u0000", Attempts: n, Lang: "go"},
		} {
			wantDL, wantErr := body, error(nil)
			if n != env.Attempts {
				wantDL, wantErr = SetAttempts(body, n)
			}
			if wantErr == nil {
				wantDL, wantErr = AppendDeadLetter(wantDL, dl)
			}
			got, err := env.DeadLetterBody(dl)
			if (err != nil) != (wantErr != nil) || !bytes.Equal(got, wantDL) {
				t.Fatalf("DeadLetterBody(attempts %d) = %q, %v; the scanning editors give %q, %v", n, got, err, wantDL, wantErr)
			}
		}
	}
}
