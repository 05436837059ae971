package fieldcrypt_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"
)

// BenchmarkFields measures the six sensitive fields of the user-registered data:
// unprotect beside decoding the envelope alone (consume side), protect beside making and
// encoding the envelope alone (publish side).
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
	decode := func() *envelope.Envelope {
		e, err := envelope.Decode(body)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	encode := func(data []byte) {
		e, err := envelope.Make(usersURN, json.RawMessage(data))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Encode(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("decode+unprotect", func(b *testing.B) {
		schematest.Paired(b, func() { decode() }, func() {
			if _, err := f.UnprotectData(ctx, usersURN, decode().Data); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("protect+encode", func(b *testing.B) {
		schematest.Paired(b, func() { encode([]byte(userData)) }, func() {
			data, err := f.ProtectData(ctx, usersURN, []byte(userData))
			if err != nil {
				b.Fatal(err)
			}
			encode(data)
		})
	})
	b.Run("unprotect-allocs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.UnprotectData(ctx, usersURN, protected); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protect-allocs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.ProtectData(ctx, usersURN, []byte(userData)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
