// Package fieldcrypt encrypts the fields of a message's data that its schema marks
// x-gdpr-sensitive, as every SDK of the family does (SPEC.md §8.6): the producer
// replaces each marked value with a ciphertext string, the consumer restores it before
// the handler runs, and the broker only ever holds the ciphertext.
//
// The marks come from the same per-URN schemas package schema validates with
// ([schema.Schema.SensitivePaths]): a property ("email"), a nested one
// ("profile.full_name"), one in every element of an array ("addresses[].line") or a
// whole object or array, encrypted as one value. A marked path absent from a message is
// skipped. Only values inside data change; the envelope frame, and every field not
// marked, keep their bytes.
//
// Each value is encrypted as its canonical JSON (compact, object keys sorted, numbers as
// written, no HTML escaping) by a [Cipher]. [AESGCM] is the family's cipher:
// AES-256-GCM, a random 12-byte nonce before the sealed bytes, standard padded base64,
// so a Go producer and a Python, PHP or Go-reference consumer holding the same key read
// each other's fields. It holds several keys, each named by an id, for rotation.
//
// Wiring, with validation on cleartext on both sides:
//
//	fields, err := fieldcrypt.New(reg, keys)
//	app.UsePublish(schema.PublishCheck(reg), fields.Protect)
//	app.Use(fields.Unprotect, schema.Middleware(reg))
//
// A value that does not decrypt (a wrong key, a tampered or truncated ciphertext, a
// cleartext string where ciphertext was expected) fails the delivery with a
// *[DecryptError] wrapped in [babelqueue.NoRetry]: it is dead-lettered at once, still
// encrypted, and the handler never sees it. A value that is not a string is left as it
// is, as the family does.
package fieldcrypt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
)

// Cipher turns the canonical JSON of one field value into a string that can sit inside
// JSON, and back. Decrypt must fail, never return other bytes, for a string it did not
// produce or that was produced under a key it does not hold. Implementations must be
// safe for concurrent use; ctx bounds a call to a KMS or a vault.
type Cipher interface {
	Encrypt(ctx context.Context, plaintext []byte) (string, error)
	Decrypt(ctx context.Context, ciphertext string) ([]byte, error)
}

// Fields protects and unprotects the sensitive fields of data. It is safe for
// concurrent use.
type Fields struct {
	p        schema.Provider
	c        Cipher
	portable bool
}

// Option tunes [New].
type Option func(*Fields)

// WithPortablePathsOnly refuses a schema with an x-gdpr-sensitive mark that the Python
// SDK 1.24.0 does not read where Go does ([schema.ErrMarkNotPortable]; the forms are in
// schema/PARITY.md): a mark under an array of arrays ("m[][].v"), on a property whose
// name holds a "." or ends in "[]", on a property of data named "", or under a marked
// object or array. Go encrypts and decrypts all of them; a Python producer leaves such a
// field in clear, and a Python consumer hands the ciphertext to its handler or fails the
// message. Turn it on where Python services share the queues: [New] then fails for such
// a schema in a provider that lists its URNs, and protecting or unprotecting data of
// such a schema fails (a Publish sends nothing; a delivery is dead-lettered as
// [babelqueue.NoRetry]). Off by default.
func WithPortablePathsOnly() Option { return func(f *Fields) { f.portable = true } }

// urnLister is the optional Provider method New uses to check every schema at once.
type urnLister interface{ URNs() []string }

// New returns the protection for the schemas p provides, with cipher c. When p can list
// its URNs (a [schema.Registry] can), every schema is checked now: one with a mark that
// cannot be honoured ([schema.ErrMarkNotProtectable]), or, with
// [WithPortablePathsOnly], one the Python SDK does not read as Go does, is an error
// here, not a field left in clear later.
func New(p schema.Provider, c Cipher, opts ...Option) (*Fields, error) {
	if p == nil || c == nil {
		return nil, errors.New("fieldcrypt: New needs a schema provider and a cipher")
	}
	f := &Fields{p: p, c: c}
	for _, o := range opts {
		if o != nil {
			o(f)
		}
	}
	if l, ok := p.(urnLister); ok {
		for _, urn := range l.URNs() {
			if s := p.Schema(urn); s != nil {
				if err := f.check(s); err != nil {
					return nil, err
				}
			}
		}
	}
	return f, nil
}

// check returns the error of a schema f does not protect with.
func (f *Fields) check(s *schema.Schema) error {
	if _, err := s.SensitivePaths(); err != nil {
		return err
	}
	if f.portable {
		return s.PortableMarks()
	}
	return nil
}

// ErrDecrypt matches every *[DecryptError].
var ErrDecrypt = errors.New("fieldcrypt: a protected field does not decrypt")

// DecryptError is a marked field whose value could not be restored.
type DecryptError struct {
	// URN is the message URN.
	URN string
	// Pointer is the RFC 6901 JSON pointer of the value inside data.
	Pointer string
	// Err is the cipher's failure (for [AESGCM]: [ErrMalformedCiphertext],
	// [ErrNoKeyOpens]) or [ErrPlaintextNotJSON].
	Err error
}

// Error names the URN, the field and the cause; never the value or a key.
func (e *DecryptError) Error() string {
	return fmt.Sprintf("fieldcrypt: %s: the value at %s does not decrypt: %v", e.URN, e.Pointer, e.Err)
}

// Unwrap returns the cause.
func (e *DecryptError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrDecrypt].
func (e *DecryptError) Is(target error) bool { return target == ErrDecrypt }

// ErrPlaintextNotJSON is a value that decrypted to bytes that are not JSON.
var ErrPlaintextNotJSON = errors.New("fieldcrypt: the decrypted bytes are not JSON")

// Protect is publish middleware that encrypts the sensitive fields of every published
// message whose URN has a schema. Add it after [schema.PublishCheck]. A failure to
// encrypt fails the Publish; nothing is sent.
func (f *Fields) Protect(next babelqueue.PublishFunc) babelqueue.PublishFunc {
	return func(ctx context.Context, o *babelqueue.Outgoing) error {
		data, err := f.ProtectData(ctx, o.Envelope.Job, o.Envelope.Data)
		if err != nil {
			return err
		}
		o.Envelope.Data = data
		return next(ctx, o)
	}
}

// Unprotect is handler middleware that decrypts the sensitive fields of every delivery
// whose URN has a schema, and hands the next handler a copy of the message carrying the
// cleartext (also through [babelqueue.MessageFromContext]). The received bytes are not
// changed: a retry or a dead-letter write carries the ciphertext. Add it before
// [schema.Middleware]. A field that does not decrypt fails the delivery with
// [babelqueue.NoRetry] around the *[DecryptError].
func (f *Fields) Unprotect(next babelqueue.Handler) babelqueue.Handler {
	return func(ctx context.Context, m *babelqueue.Message) error {
		data, changed, err := f.unprotect(ctx, m.URN(), m.Envelope.Data)
		if err != nil {
			return babelqueue.NoRetry(err)
		}
		if !changed {
			return next(ctx, m)
		}
		env := *m.Envelope
		env.Data = data
		mc := *m
		mc.Envelope = &env
		return next(babelqueue.ContextWithMessage(ctx, &mc), &mc)
	}
}

// ProtectData returns data (the raw JSON of a data block) with every sensitive field of
// urn's schema encrypted. Without a schema, or without marks, it returns data itself.
func (f *Fields) ProtectData(ctx context.Context, urn string, data []byte) ([]byte, error) {
	out, _, err := f.each(urn, data, func(raw []byte, ptr string) ([]byte, error) {
		plain, err := canonical(raw)
		if err != nil {
			return nil, fmt.Errorf("fieldcrypt: %s: the value at %s: %w", urn, ptr, err)
		}
		ct, err := f.c.Encrypt(ctx, plain)
		if err != nil {
			return nil, fmt.Errorf("fieldcrypt: %s: encrypt the value at %s: %w", urn, ptr, err)
		}
		return jsonString(ct), nil
	})
	return out, err
}

// UnprotectData returns data with every sensitive field of urn's schema decrypted. A
// marked value that is not a JSON string is left as it is; one that does not decrypt is
// a *[DecryptError]. Without a schema, or without anything to decrypt, it returns data
// itself.
func (f *Fields) UnprotectData(ctx context.Context, urn string, data []byte) ([]byte, error) {
	out, _, err := f.unprotect(ctx, urn, data)
	return out, err
}

func (f *Fields) unprotect(ctx context.Context, urn string, data []byte) ([]byte, bool, error) {
	return f.each(urn, data, func(raw []byte, ptr string) ([]byte, error) {
		if raw[0] != '"' {
			return nil, nil
		}
		var ct string
		if err := json.Unmarshal(raw, &ct); err != nil {
			return nil, &DecryptError{URN: urn, Pointer: ptr, Err: err}
		}
		plain, err := f.c.Decrypt(ctx, ct)
		if err != nil {
			return nil, &DecryptError{URN: urn, Pointer: ptr, Err: err}
		}
		out, err := compact(plain)
		if err != nil {
			return nil, &DecryptError{URN: urn, Pointer: ptr, Err: ErrPlaintextNotJSON}
		}
		return out, nil
	})
}

// each runs leaf on every value at a sensitive path of urn's schema, in the order of
// data, and says whether any value changed.
func (f *Fields) each(urn string, data []byte, leaf leafFunc) ([]byte, bool, error) {
	s := f.p.Schema(urn)
	if s == nil || len(data) == 0 {
		return data, false, nil
	}
	if err := f.check(s); err != nil {
		return nil, false, err
	}
	paths, _ := s.SensitivePaths()
	if len(paths) == 0 {
		return data, false, nil
	}
	steps := make([][]schema.Step, len(paths))
	for i, p := range paths {
		steps[i] = p.Steps
	}
	out, err := apply(data, steps, "", leaf)
	if err != nil {
		return nil, false, err
	}
	if out == nil {
		return data, false, nil
	}
	return out, true, nil
}
