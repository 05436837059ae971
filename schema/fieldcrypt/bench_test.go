package fieldcrypt_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
)

// BenchmarkFields measures protecting (publish side) and unprotecting (consume side) the
// six sensitive fields of the user-registered data, beside decoding the envelope alone.
func BenchmarkFields(b *testing.B) {
	ctx := context.Background()
	f := newFields(b, registry(b), newCipher(b, newKey(b, "k")))
	protected, err := f.ProtectData(ctx, usersURN, []byte(userData))
	if err != nil {
		b.Fatal(err)
	}
	env, err := envelope.Make(usersURN, json.RawMessage(protected))
	if err != nil {
		b.Fatal(err)
	}
	body, err := env.Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := envelope.Decode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode+unprotect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := envelope.Decode(body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.UnprotectData(ctx, usersURN, e.Data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.ProtectData(ctx, usersURN, []byte(userData)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
