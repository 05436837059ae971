package fieldcrypt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/fieldcrypt"
)

const usersURN = "urn:babel:users:registered"

func registry(t testing.TB) *schema.Registry {
	t.Helper()
	reg, err := schema.LoadRegistry("../testdata/registry")
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func newKey(t testing.TB, id string) fieldcrypt.Key {
	t.Helper()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	return fieldcrypt.Key{ID: id, Secret: secret}
}

func newCipher(t testing.TB, keys ...fieldcrypt.Key) *fieldcrypt.AESGCM {
	t.Helper()
	c, err := fieldcrypt.NewAESGCM(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newFields(t testing.TB, p schema.Provider, c fieldcrypt.Cipher) *fieldcrypt.Fields {
	t.Helper()
	f, err := fieldcrypt.New(p, c)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// userData is the example registry's user-registered data: every path form of SPEC.md
// §8.6 (a property, nested properties, a property of every array element, a whole
// object), a number written with a fraction and non-ASCII text.
const userData = `{"user_id":7781,"email":"ayse@example.com","phone":"+90 555 010 2030","locale":"tr-TR",` +
	`"profile":{"full_name":"Ayşe Yılmaz","national_id":"10000000146","newsletter":false},` +
	`"addresses":[{"line":"İstiklal Cad. 10","country":"TR"},{"country":"DE"},{"line":"Kurfürstendamm 21","country":"DE"}],` +
	`"billing":{"iban":"TR330006100519786457841326","holder":"Ayşe Yılmaz","limit":1.50}}`

var secrets = []string{"ayse@example.com", "+90 555 010 2030", "Ayşe Yılmaz", "10000000146", "İstiklal", "Kurfürstendamm", "TR3300"}

// TestProtectUnprotect: every marked value becomes a ciphertext string, everything else
// keeps its bytes, and unprotecting restores the data exactly (numbers as written).
func TestProtectUnprotect(t *testing.T) {
	ctx := context.Background()
	c := newCipher(t, newKey(t, "k1"))
	f := newFields(t, registry(t), c)
	protected, err := f.ProtectData(ctx, usersURN, []byte(userData))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if bytes.Contains(protected, []byte(s)) {
			t.Errorf("%q is still in clear: %s", s, protected)
		}
	}
	var p map[string]any
	if err := json.Unmarshal(protected, &p); err != nil {
		t.Fatal(err)
	}
	// Unmarked values are untouched.
	if p["user_id"] != float64(7781) || p["locale"] != "tr-TR" || p["profile"].(map[string]any)["newsletter"] != false {
		t.Fatalf("unmarked values changed: %s", protected)
	}
	addrs := p["addresses"].([]any)
	if addrs[0].(map[string]any)["country"] != "TR" || len(addrs[1].(map[string]any)) != 1 {
		t.Fatalf("addresses: %v (an element without the marked key stays as it is)", addrs)
	}
	// Each marked value is the ciphertext of its canonical JSON.
	for ptr, want := range map[string]string{
		"email":     `"ayse@example.com"`,
		"billing":   `{"holder":"Ayşe Yılmaz","iban":"TR330006100519786457841326","limit":1.50}`,
		"addresses": `"İstiklal Cad. 10"`,
	} {
		v := p[ptr]
		if ptr == "addresses" {
			v = addrs[0].(map[string]any)["line"]
		}
		ct, ok := v.(string)
		if !ok {
			t.Fatalf("%s is not a ciphertext string: %v", ptr, v)
		}
		plain, err := c.Decrypt(ctx, ct)
		if err != nil || string(plain) != want {
			t.Fatalf("%s decrypts to %s (%v), want %s", ptr, plain, err, want)
		}
	}
	restored, err := f.UnprotectData(ctx, usersURN, protected)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, restored, []byte(userData))
	if !bytes.Contains(restored, []byte(`"limit":1.50`)) {
		t.Fatalf("a number was rewritten: %s", restored)
	}
	// Unprotecting cleartext that holds no strings at marked places changes nothing,
	// and a URN without a schema is passed through.
	if out, err := f.UnprotectData(ctx, "urn:babel:no:schema", []byte(`{"email":"x"}`)); err != nil || string(out) != `{"email":"x"}` {
		t.Fatalf("%s %v", out, err)
	}
}

func assertSameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// TestProtectShapes: values of every JSON type, absent paths, and places whose shape
// differs from the schema's.
func TestProtectShapes(t *testing.T) {
	ctx := context.Background()
	s, err := schema.Compile("urn:x", []byte(`{"properties":{
		"a":{"x-gdpr-sensitive":true},
		"tags":{"items":{"x-gdpr-sensitive":true}},
		"m":{"items":{"items":{"properties":{"v":{"x-gdpr-sensitive":true}}}}},
		"o":{"properties":{"p":{"x-gdpr-sensitive":true}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := schema.NewRegistry(s)
	if err != nil {
		t.Fatal(err)
	}
	f := newFields(t, reg, newCipher(t, newKey(t, "k")))
	for _, data := range []string{
		`{"a":null}`, `{"a":true}`, `{"a":-12.5e3}`, `{"a":[1,{"b":"<&>"}]}`, `{"a":{"z":1,"y":[]}}`, `{"a":""}`,
		`{"tags":["x",2,null]}`, `{"tags":"not an array"}`, `{"tags":[]}`,
		`{"m":[[{"v":"deep"},{"w":1}],[]]}`, `{"m":[1,[2]]}`,
		`{"o":"not an object"}`, `{"o":{"q":1}}`, `{}`, `{"unrelated":{"a":1}}`,
		`{ "a" : "spaced" , "x\u00e9" : 1 }`,
	} {
		protected, err := f.ProtectData(ctx, "urn:x", []byte(data))
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		restored, err := f.UnprotectData(ctx, "urn:x", protected)
		if err != nil {
			t.Fatalf("%s: %v (protected %s)", data, err, protected)
		}
		assertSameJSON(t, restored, []byte(data))
	}
}

// TestUnprotectFailures: a value that does not decrypt is a typed error naming the
// field, never the value or the key.
func TestUnprotectFailures(t *testing.T) {
	ctx := context.Background()
	k1 := newKey(t, "k1")
	reg := registry(t)
	protected, err := newFields(t, reg, newCipher(t, k1)).ProtectData(ctx, usersURN, []byte(userData))
	if err != nil {
		t.Fatal(err)
	}
	other := newFields(t, reg, newCipher(t, newKey(t, "k2")))
	_, err = other.UnprotectData(ctx, usersURN, protected)
	var de *fieldcrypt.DecryptError
	if !errors.As(err, &de) || !errors.Is(err, fieldcrypt.ErrDecrypt) || !errors.Is(err, fieldcrypt.ErrNoKeyOpens) {
		t.Fatalf("wrong key: %v", err)
	}
	if de.URN != usersURN || de.Pointer != "/email" {
		t.Fatalf("wrong key: %+v, want the first marked value in data", de)
	}
	if msg := err.Error(); strings.Contains(msg, base64.StdEncoding.EncodeToString(k1.Secret)) || !strings.Contains(msg, "k2") {
		t.Fatalf("error text %q", msg)
	}

	right := newFields(t, reg, newCipher(t, k1))
	var p map[string]any
	if err := json.Unmarshal(protected, &p); err != nil {
		t.Fatal(err)
	}
	ct := p["email"].(string)
	raw, _ := base64.StdEncoding.DecodeString(ct)
	raw[len(raw)-1] ^= 1
	for name, tc := range map[string]struct {
		email string
		want  error
	}{
		"tampered":           {base64.StdEncoding.EncodeToString(raw), fieldcrypt.ErrNoKeyOpens},
		"truncated":          {ct[:16], fieldcrypt.ErrMalformedCiphertext},
		"cleartext":          {"ayse@example.com", fieldcrypt.ErrMalformedCiphertext},
		"url-safe base64":    {strings.NewReplacer("+", "-", "/", "_").Replace(ct) + "-_", fieldcrypt.ErrMalformedCiphertext},
		"not JSON plaintext": {mustEncrypt(t, k1, "not json"), fieldcrypt.ErrPlaintextNotJSON},
	} {
		data, _ := json.Marshal(map[string]any{"user_id": 1, "email": tc.email})
		_, err := right.UnprotectData(ctx, usersURN, data)
		if !errors.Is(err, fieldcrypt.ErrDecrypt) || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "/email") {
			t.Errorf("%s: %v, want %v at /email", name, err, tc.want)
		}
		if strings.Contains(err.Error(), "ayse@") {
			t.Errorf("%s: the error shows the value: %v", name, err)
		}
	}
	// A marked value that is not a string was never protected: it is left as it is.
	out, err := right.UnprotectData(ctx, usersURN, []byte(`{"user_id":1,"email":42,"billing":{"iban":"x"}}`))
	if err != nil || string(out) != `{"user_id":1,"email":42,"billing":{"iban":"x"}}` {
		t.Fatalf("%s %v", out, err)
	}
}

func mustEncrypt(t *testing.T, k fieldcrypt.Key, plain string) string {
	t.Helper()
	ct, err := newCipher(t, k).Encrypt(context.Background(), []byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// TestKeyRotation: a consumer holding the new and the old key reads both; the key id
// says which key sealed a value; a cipher without the key refuses.
func TestKeyRotation(t *testing.T) {
	ctx := context.Background()
	old, cur := newKey(t, "2025-01"), newKey(t, "2025-07")
	sealedOld := mustEncrypt(t, old, `"a"`)
	both := newCipher(t, cur, old)
	sealedNew, err := both.Encrypt(ctx, []byte(`"b"`))
	if err != nil {
		t.Fatal(err)
	}
	for ct, want := range map[string]string{sealedOld: "2025-01", sealedNew: "2025-07"} {
		id, err := both.KeyID(ct)
		if err != nil || id != want {
			t.Fatalf("KeyID %q %v, want %s", id, err, want)
		}
	}
	if p, err := both.Decrypt(ctx, sealedOld); err != nil || string(p) != `"a"` {
		t.Fatalf("old value: %s %v", p, err)
	}
	if _, err := newCipher(t, cur).Decrypt(ctx, sealedOld); !errors.Is(err, fieldcrypt.ErrNoKeyOpens) || !strings.Contains(err.Error(), "2025-07") {
		t.Fatalf("without the old key: %v", err)
	}
	if got := both.KeyIDs(); !reflect.DeepEqual(got, []string{"2025-07", "2025-01"}) {
		t.Fatalf("KeyIDs %v", got)
	}
	// Two encryptions of one value differ (a fresh nonce each).
	a, _ := both.Encrypt(ctx, []byte(`"x"`))
	b, _ := both.Encrypt(ctx, []byte(`"x"`))
	if a == b {
		t.Fatal("the nonce repeated")
	}
}

func TestKeyErrors(t *testing.T) {
	k := newKey(t, "k")
	for name, keys := range map[string][]fieldcrypt.Key{
		"none":      nil,
		"no id":     {{Secret: k.Secret}},
		"duplicate": {k, k},
		"16 bytes":  {{ID: "short", Secret: k.Secret[:16]}},
	} {
		if _, err := fieldcrypt.NewAESGCM(keys...); !errors.Is(err, fieldcrypt.ErrKey) {
			t.Errorf("%s: %v", name, err)
		}
	}
	got, err := fieldcrypt.KeyFromBase64("k", base64.StdEncoding.EncodeToString(k.Secret)+"\n")
	if err != nil || !bytes.Equal(got.Secret, k.Secret) {
		t.Fatalf("KeyFromBase64: %v", err)
	}
	if _, err := fieldcrypt.KeyFromBase64("k", "not base64!"); err == nil || strings.Contains(err.Error(), "not base64!") {
		t.Fatalf("KeyFromBase64 of garbage: %v", err)
	}
}

// TestNewRefusesLostMarks: a schema with a mark no SDK encrypts is refused up front.
func TestNewRefusesLostMarks(t *testing.T) {
	s, err := schema.Compile("urn:x", []byte(`{"properties":{"a":{"$ref":"#/definitions/e"}},"definitions":{"e":{"x-gdpr-sensitive":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := schema.NewRegistry(s)
	if err != nil {
		t.Fatal(err)
	}
	c := newCipher(t, newKey(t, "k"))
	if _, err := fieldcrypt.New(reg, c); !errors.Is(err, schema.ErrMarkNotProtectable) {
		t.Fatalf("New: %v", err)
	}
	// A provider that cannot list its URNs is checked per message instead.
	f := newFields(t, single{s}, c)
	if _, err := f.ProtectData(context.Background(), "urn:x", []byte(`{"a":"x"}`)); !errors.Is(err, schema.ErrMarkNotProtectable) {
		t.Fatalf("ProtectData: %v", err)
	}
	if _, err := fieldcrypt.New(nil, c); err == nil {
		t.Fatal("New without a provider")
	}
}

type single struct{ s *schema.Schema }

func (p single) Schema(urn string) *schema.Schema {
	if urn == p.s.URN() {
		return p.s
	}
	return nil
}

// TestPortablePathsOnly: told to, the protection refuses a schema whose marks the Python
// SDK 1.24.0 does not read where Go does (TestPythonEdgeForms shows what Python does
// with each form); without the option Go protects them all.
func TestPortablePathsOnly(t *testing.T) {
	ctx := context.Background()
	c := newCipher(t, newKey(t, "k"))
	for _, form := range []struct{ schema, data string }{
		{`{"properties":{"a.b":{"x-gdpr-sensitive":true}}}`, `{"a.b":"secret"}`},
		{`{"properties":{"tags[]":{"x-gdpr-sensitive":true}}}`, `{"tags[]":"secret"}`},
		{`{"properties":{"":{"x-gdpr-sensitive":true}}}`, `{"":"secret"}`},
		{`{"properties":{"m":{"items":{"items":{"properties":{"v":{"x-gdpr-sensitive":true}}}}}}}`, `{"m":[[{"v":"secret"}]]}`},
		{`{"properties":{"p":{"x-gdpr-sensitive":true,"properties":{"q":{"x-gdpr-sensitive":true}}}}}`, `{"p":{"q":"secret"}}`},
	} {
		s, err := schema.Compile("urn:x", []byte(form.schema))
		if err != nil {
			t.Fatal(err)
		}
		reg, err := schema.NewRegistry(s)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := newFields(t, reg, c).ProtectData(ctx, "urn:x", []byte(form.data))
		if err != nil || bytes.Contains(sealed, []byte("secret")) {
			t.Errorf("%s without the option: %s %v", form.schema, sealed, err)
		}
		if _, err := fieldcrypt.New(reg, c, fieldcrypt.WithPortablePathsOnly()); !errors.Is(err, schema.ErrMarkNotPortable) {
			t.Errorf("%s: New with the option: %v", form.schema, err)
		}
		f, err := fieldcrypt.New(single{s}, c, fieldcrypt.WithPortablePathsOnly())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.ProtectData(ctx, "urn:x", []byte(form.data)); !errors.Is(err, schema.ErrMarkNotPortable) {
			t.Errorf("%s: ProtectData with the option: %v", form.schema, err)
		}
		if _, err := f.UnprotectData(ctx, "urn:x", sealed); !errors.Is(err, schema.ErrMarkNotPortable) {
			t.Errorf("%s: UnprotectData with the option: %v", form.schema, err)
		}
	}
	// Every path form of the example registry is one Python reads.
	f, err := fieldcrypt.New(registry(t), c, fieldcrypt.WithPortablePathsOnly())
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := f.ProtectData(ctx, usersURN, []byte(userData))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := f.UnprotectData(ctx, usersURN, sealed)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, plain, []byte(userData))
}
