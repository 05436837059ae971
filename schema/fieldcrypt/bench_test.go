package fieldcrypt_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
)

// paired times base and work in turns inside one loop (blocks of 8), so both see the
// same load on a shared machine, and reports each per message and their ratio.
func paired(b *testing.B, base, work func()) {
	const block = 8
	var tb, tw time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range block {
			base()
		}
		t1 := time.Now()
		for range block {
			work()
		}
		tb += t1.Sub(t0)
		tw += time.Since(t1)
	}
	n := float64(b.N * block)
	b.ReportMetric(float64(tb.Nanoseconds())/n, "base-ns/msg")
	b.ReportMetric(float64(tw.Nanoseconds())/n, "with-ns/msg")
	b.ReportMetric(float64(tw)/float64(tb), "x-base")
}

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
		paired(b, func() { decode() }, func() {
			if _, err := f.UnprotectData(ctx, usersURN, decode().Data); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("protect+encode", func(b *testing.B) {
		paired(b, func() { encode([]byte(userData)) }, func() {
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
