package fieldcrypt

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Key is one AES-256 key and the id that names it.
type Key struct {
	// ID names the key in errors and in [AESGCM.KeyID]; it never travels with the data.
	ID string
	// Secret is the 32-byte AES-256 key.
	Secret []byte
}

// KeyFromBase64 returns the key id with secret, a standard base64 encoding of 32 bytes
// (as `openssl rand -base64 32` prints). The error never contains the secret.
func KeyFromBase64(id, secret string) (Key, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret))
	if err != nil {
		return Key{}, fmt.Errorf("fieldcrypt: key %q is not standard base64", id)
	}
	return Key{ID: id, Secret: b}, nil
}

// ErrKey matches every error about a key given to [NewAESGCM].
var ErrKey = errors.New("fieldcrypt: bad key")

// ErrMalformedCiphertext is a value that is not standard base64, or too short to hold a
// nonce and a tag: not something the family's AES-GCM cipher produced.
var ErrMalformedCiphertext = errors.New("fieldcrypt: malformed ciphertext")

// ErrNoKeyOpens is a ciphertext that none of the held keys authenticates: a wrong key,
// a key not held yet or any more, or tampered bytes.
var ErrNoKeyOpens = errors.New("fieldcrypt: no held key opens the ciphertext")

const (
	nonceSize = 12
	tagSize   = 16
)

// AESGCM is the family's field cipher: AES-256-GCM with a random 12-byte nonce per
// value, written as standard padded base64 of nonce || ciphertext || tag, with no
// associated data. It is the format of the Go reference's AESGCMCipher and of the AES-GCM
// cipher the Python SDK's gdpr module documents, so any of them opens what another
// sealed with the same key.
//
// It holds one or more keys for rotation. Encrypt always uses the first. The format
// carries no key id, so Decrypt tries the keys in order (GCM's tag tells the right key
// from the others) and [AESGCM.KeyID] says which one opens a value. To rotate: deploy
// consumers with the new key added after the current one, then producers (and
// consumers) with the new key first, and drop the old key once no message sealed with
// it is left on any queue, dead-letter queue or outbox.
//
// It is safe for concurrent use.
type AESGCM struct {
	keys []aeadKey
}

type aeadKey struct {
	id   string
	aead cipher.AEAD
}

// NewAESGCM returns the cipher holding keys, the first the one that encrypts. Each key
// needs a non-empty id, unique among them, and a 32-byte secret.
func NewAESGCM(keys ...Key) (*AESGCM, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: NewAESGCM needs at least one key", ErrKey)
	}
	c := &AESGCM{}
	seen := map[string]bool{}
	for _, k := range keys {
		if k.ID == "" {
			return nil, fmt.Errorf("%w: a key without an id", ErrKey)
		}
		if seen[k.ID] {
			return nil, fmt.Errorf("%w: key id %q given twice", ErrKey, k.ID)
		}
		seen[k.ID] = true
		if len(k.Secret) != 32 {
			return nil, fmt.Errorf("%w: key %q has %d bytes, AES-256 needs 32", ErrKey, k.ID, len(k.Secret))
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrKey, k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrKey, k.ID, err)
		}
		c.keys = append(c.keys, aeadKey{id: k.ID, aead: aead})
	}
	return c, nil
}

// Encrypt seals plaintext with the first key and a fresh random nonce.
func (c *AESGCM) Encrypt(_ context.Context, plaintext []byte) (string, error) {
	k := c.keys[0]
	buf := make([]byte, nonceSize, nonceSize+len(plaintext)+tagSize)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("fieldcrypt: nonce: %w", err)
	}
	sealed := k.aead.Seal(buf, buf[:nonceSize], plaintext, nil)
	return base64.StdEncoding.EncodeToString(sealed), nil
}

// Decrypt opens a value sealed with any of the held keys.
func (c *AESGCM) Decrypt(_ context.Context, ciphertext string) ([]byte, error) {
	_, plain, err := c.open(ciphertext)
	return plain, err
}

// KeyID returns the id of the held key that opens ciphertext: during a rotation, it
// finds values still sealed with the old key.
func (c *AESGCM) KeyID(ciphertext string) (string, error) {
	id, _, err := c.open(ciphertext)
	return id, err
}

// KeyIDs returns the ids of the held keys, the encrypting key first.
func (c *AESGCM) KeyIDs() []string {
	ids := make([]string, len(c.keys))
	for i, k := range c.keys {
		ids[i] = k.id
	}
	return ids
}

func (c *AESGCM) open(ciphertext string) (string, []byte, error) {
	raw, err := base64.StdEncoding.DecodeString(ciphertext)
	if err != nil {
		return "", nil, fmt.Errorf("%w: not standard base64", ErrMalformedCiphertext)
	}
	if len(raw) < nonceSize+tagSize {
		return "", nil, fmt.Errorf("%w: %d bytes, shorter than a nonce and a tag", ErrMalformedCiphertext, len(raw))
	}
	nonce, sealed := raw[:nonceSize], raw[nonceSize:]
	for _, k := range c.keys {
		if plain, err := k.aead.Open(nil, nonce, sealed, nil); err == nil {
			return k.id, plain, nil
		}
	}
	return "", nil, fmt.Errorf("%w (held: %s)", ErrNoKeyOpens, strings.Join(c.KeyIDs(), ", "))
}
