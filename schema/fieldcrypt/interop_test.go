package fieldcrypt_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/fieldcrypt"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"

	_ "github.com/babelqueue-go/babelqueue/transport/redis"
)

// usersSchema is the example registry's users-registered schema, as the Python peer
// reads it.
func usersSchema(t *testing.T) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("../testdata/registry/schemas/users-registered.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64(k fieldcrypt.Key) string { return base64.StdEncoding.EncodeToString(k.Secret) }

type pyAnswer struct {
	Data  json.RawMessage `json:"data"`
	Error string          `json:"error"`
}

func python(t *testing.T, doc any, args ...string) pyAnswer {
	t.Helper()
	lines := schematest.Python(t, doc, args...)
	if len(lines) != 1 {
		t.Fatalf("python printed %d lines", len(lines))
	}
	var a pyAnswer
	if err := json.Unmarshal(lines[0], &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPythonProtectsGoUnprotects: data the Python SDK protected with the family's
// AES-256-GCM format is restored by Go with the same key.
func TestPythonProtectsGoUnprotects(t *testing.T) {
	k := newKey(t, "shared")
	a := python(t, map[string]any{"schema": usersSchema(t), "data": json.RawMessage(userData)}, "protect", b64(k))
	for _, s := range secrets {
		if bytes.Contains(a.Data, []byte(s)) {
			t.Fatalf("Python left %q in clear: %s", s, a.Data)
		}
	}
	// A consumer holding a newer key first still opens it: key rotation.
	f := newFields(t, registry(t), newCipher(t, newKey(t, "newer"), k))
	got, err := f.UnprotectData(context.Background(), usersURN, a.Data)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, got, []byte(userData))
}

// TestGoProtectsPythonUnprotects: the reverse direction.
func TestGoProtectsPythonUnprotects(t *testing.T) {
	k := newKey(t, "shared")
	protected, err := newFields(t, registry(t), newCipher(t, k)).ProtectData(context.Background(), usersURN, []byte(userData))
	if err != nil {
		t.Fatal(err)
	}
	a := python(t, map[string]any{"schema": usersSchema(t), "data": json.RawMessage(protected)}, "unprotect", b64(k))
	if a.Error != "" {
		t.Fatalf("Python: %s", a.Error)
	}
	assertSameJSON(t, a.Data, []byte(userData))
}

// TestWrongKeyAgreement: with a key that did not seal the data, Go and Python both
// refuse it, whoever protected it.
func TestWrongKeyAgreement(t *testing.T) {
	ctx := context.Background()
	right, wrong := newKey(t, "right"), newKey(t, "wrong")
	byGo, err := newFields(t, registry(t), newCipher(t, right)).ProtectData(ctx, usersURN, []byte(userData))
	if err != nil {
		t.Fatal(err)
	}
	byPython := python(t, map[string]any{"schema": usersSchema(t), "data": json.RawMessage(userData)}, "protect", b64(right)).Data
	goWrong := newFields(t, registry(t), newCipher(t, wrong))
	for name, data := range map[string]json.RawMessage{"protected by Go": byGo, "protected by Python": byPython} {
		if _, err := goWrong.UnprotectData(ctx, usersURN, data); !errors.Is(err, fieldcrypt.ErrNoKeyOpens) {
			t.Errorf("%s: Go with the wrong key: %v", name, err)
		}
		a := python(t, map[string]any{"schema": usersSchema(t), "data": data}, "unprotect", b64(wrong))
		if !strings.HasPrefix(a.Error, "DecryptError") {
			t.Errorf("%s: Python with the wrong key: %+v", name, a)
		}
	}
}

// runGo consumes one message of r's queue with the Go runtime, field encryption and
// schema checks wired as documented, and returns what the handler saw (nil when it did
// not run) and the settlement.
func runGo(t *testing.T, r *schematest.Redis, c fieldcrypt.Cipher) (json.RawMessage, babelqueue.SettledEvent) {
	t.Helper()
	app, rec := r.Consumer(t)
	reg := registry(t)
	fields := newFields(t, reg, c)
	app.Use(fields.Unprotect, schema.Middleware(reg))
	var (
		mu   sync.Mutex
		seen json.RawMessage
	)
	app.Handle(usersURN, func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(json.RawMessage{}, m.Envelope.Data...)
		return nil
	})
	ev := schematest.RunUntilSettled(t, app, rec, 1)[0]
	mu.Lock()
	defer mu.Unlock()
	return seen, ev
}

// assertNoClear reads the raw bytes Redis holds for list and checks that no sensitive
// value is among them; it returns the data of the single envelope there.
func assertNoClear(t *testing.T, r *schematest.Redis, list string) json.RawMessage {
	t.Helper()
	raw := r.Raw(t, list)
	if len(raw) != 1 {
		t.Fatalf("%d elements on %s, want 1", len(raw), list)
	}
	for _, s := range secrets {
		if bytes.Contains(raw[0], []byte(s)) {
			t.Fatalf("%q is in clear on the broker: %s", s, raw[0])
		}
	}
	env, err := envelope.Decode(raw[0])
	if err != nil {
		t.Fatal(err)
	}
	return env.Data
}

// TestRedisGoProducerPythonConsumer: a Go producer protects on publish; the bytes on
// Redis hold no sensitive value; a Python consumer restores the data.
func TestRedisGoProducerPythonConsumer(t *testing.T) {
	r := schematest.NewRedis(t)
	k := newKey(t, "shared")
	app, err := babelqueue.Open(context.Background(), r.URL, babelqueue.WithQueue(r.Queue))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	reg := registry(t)
	app.UsePublish(schema.PublishCheck(reg), newFields(t, reg, newCipher(t, k)).Protect)
	if _, err := app.Publish(context.Background(), usersURN, json.RawMessage(userData)); err != nil {
		t.Fatal(err)
	}
	assertNoClear(t, r, r.Queue)
	got := python(t, map[string]any{"schema": usersSchema(t)}, "handle", r.URL, r.Queue, usersURN, b64(k), "1")
	if got.Error != "" {
		t.Fatal(got.Error)
	}
	assertSameJSON(t, got.Data, []byte(userData))
}

// TestRedisPythonProducerGoConsumer: the reverse direction.
func TestRedisPythonProducerGoConsumer(t *testing.T) {
	r := schematest.NewRedis(t)
	k := newKey(t, "shared")
	python(t, map[string]any{"schema": usersSchema(t), "data": json.RawMessage(userData)}, "produce", r.URL, r.Queue, usersURN, b64(k))
	assertNoClear(t, r, r.Queue)
	seen, ev := runGo(t, r, newCipher(t, k))
	if ev.Action != babelqueue.ActionAck {
		t.Fatalf("settled %s/%s: %v", ev.Kind, ev.Action, ev.Cause)
	}
	assertSameJSON(t, seen, []byte(userData))
}

// TestRedisWrongKeyBothConsumers: one message sealed with the right key goes to a Go
// consumer and one to a Python consumer, both holding a wrong key. Both refuse it and
// dead-letter it, still encrypted (the Go consumer on the first delivery, as NoRetry;
// Python after its max_attempts, here 1); neither handler sees the data.
func TestRedisWrongKeyBothConsumers(t *testing.T) {
	right, wrong := newKey(t, "right"), newKey(t, "wrong")
	doc := map[string]any{"schema": usersSchema(t), "data": json.RawMessage(userData)}

	goSide := schematest.NewRedis(t)
	python(t, doc, "produce", goSide.URL, goSide.Queue, usersURN, b64(right))
	seen, ev := runGo(t, goSide, newCipher(t, wrong))
	if seen != nil || ev.Action != babelqueue.ActionDeadLetter || ev.Attempts != 1 || !errors.Is(ev.Cause, fieldcrypt.ErrDecrypt) {
		t.Fatalf("Go consumer: handler saw %s; settled %s/%s attempts %d: %v", seen, ev.Kind, ev.Action, ev.Attempts, ev.Cause)
	}

	pySide := schematest.NewRedis(t)
	python(t, doc, "produce", pySide.URL, pySide.Queue, usersURN, b64(right))
	pyLines := schematest.Python(t, map[string]any{"schema": usersSchema(t)}, "handle", pySide.URL, pySide.Queue, usersURN, b64(wrong), "1")
	if len(pyLines) != 0 {
		t.Fatalf("the Python handler printed %s", pyLines)
	}

	restore := newFields(t, registry(t), newCipher(t, right))
	for name, r := range map[string]*schematest.Redis{"Go": goSide, "Python": pySide} {
		data := assertNoClear(t, r, r.Queue+".dlq")
		var dl struct {
			DeadLetter struct {
				Reason string `json:"reason"`
				Error  string `json:"error"`
			} `json:"dead_letter"`
		}
		if err := json.Unmarshal(r.Raw(t, r.Queue+".dlq")[0], &dl); err != nil {
			t.Fatal(err)
		}
		if dl.DeadLetter.Reason != "failed" || !strings.Contains(strings.ToLower(dl.DeadLetter.Error), "decrypt") {
			t.Errorf("%s consumer dead-lettered with %+v", name, dl.DeadLetter)
		}
		plain, err := restore.UnprotectData(context.Background(), usersURN, data)
		if err != nil {
			t.Fatalf("%s consumer's dead letter no longer opens with the right key: %v", name, err)
		}
		assertSameJSON(t, plain, []byte(userData))
	}
}

// TestPythonEdgeForms records what the Python SDK 1.24.0 does with two path forms where
// Go goes further: a mark under a marked object (both seal the object once; Python's own
// unprotect then fails on the inner mark, Go's does not) and a mark under an array of
// arrays (Python leaves it in clear, Go seals it).
func TestPythonEdgeForms(t *testing.T) {
	ctx := context.Background()
	k := newKey(t, "shared")
	nested := json.RawMessage(`{"properties":{"p":{"x-gdpr-sensitive":true,"properties":{"q":{"x-gdpr-sensitive":true}}}}}`)
	deep := json.RawMessage(`{"properties":{"m":{"items":{"items":{"properties":{"v":{"x-gdpr-sensitive":true}}}}}}}`)
	fieldsFor := func(doc json.RawMessage) *fieldcrypt.Fields {
		s, err := schema.Compile("urn:x", doc)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := schema.NewRegistry(s)
		if err != nil {
			t.Fatal(err)
		}
		return newFields(t, reg, newCipher(t, k))
	}

	data := json.RawMessage(`{"p":{"q":"secret"}}`)
	byPython := python(t, map[string]any{"schema": nested, "data": data}, "protect", b64(k)).Data
	if bytes.Contains(byPython, []byte("secret")) {
		t.Fatalf("Python left the nested value in clear: %s", byPython)
	}
	if a := python(t, map[string]any{"schema": nested, "data": byPython}, "unprotect", b64(k)); !strings.HasPrefix(a.Error, "DecryptError") {
		t.Fatalf("Python's unprotect of its own nested protect: %+v (the README says it fails)", a)
	}
	got, err := fieldsFor(nested).UnprotectData(ctx, "urn:x", byPython)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, got, data)

	data = json.RawMessage(`{"m":[[{"v":"secret"}]]}`)
	if a := python(t, map[string]any{"schema": deep, "data": data}, "protect", b64(k)); !bytes.Contains(a.Data, []byte("secret")) {
		t.Fatalf("Python now protects an array of arrays (%s): update the README", a.Data)
	}
	sealed, err := fieldsFor(deep).ProtectData(ctx, "urn:x", data)
	if err != nil || bytes.Contains(sealed, []byte("secret")) {
		t.Fatalf("Go: %s %v", sealed, err)
	}
}

// TestPythonMisreadsPathForms records what the Python SDK 1.24.0 does with the path
// forms it does not read where Go does (schema/PARITY.md; refused by
// fieldcrypt.WithPortablePathsOnly): its protect leaves the marked value in clear (or
// seals another field), and its unprotect of Go's sealed data hands the ciphertext on
// without an error, so its handler sees ciphertext (or, where the path it reads leads
// to another string, fails with DecryptError).
func TestPythonMisreadsPathForms(t *testing.T) {
	ctx := context.Background()
	k := newKey(t, "shared")
	for _, form := range []struct {
		name, schema, data string
		sealsOther         bool // Python's protect seals a field that is not marked
		unprotectFails     bool // Python's unprotect of Go's data fails
	}{
		{"property name with a dot", `{"properties":{"a.b":{"x-gdpr-sensitive":true}}}`, `{"a.b":"secret"}`, false, false},
		{"property name with a dot beside the object it names", `{"properties":{"a.b":{"x-gdpr-sensitive":true}}}`, `{"a.b":"secret","a":{"b":"other"}}`, true, true},
		{"property name ending in []", `{"properties":{"tags[]":{"x-gdpr-sensitive":true}}}`, `{"tags[]":"secret"}`, false, false},
		{"property named \"\" at the top of data", `{"properties":{"":{"x-gdpr-sensitive":true}}}`, `{"":"secret"}`, false, false},
		{"array of arrays", `{"properties":{"m":{"items":{"items":{"properties":{"v":{"x-gdpr-sensitive":true}}}}}}}`, `{"m":[[{"v":"secret"}]]}`, false, false},
	} {
		t.Run(form.name, func(t *testing.T) {
			doc := json.RawMessage(form.schema)
			byPython := python(t, map[string]any{"schema": doc, "data": json.RawMessage(form.data)}, "protect", b64(k)).Data
			if !bytes.Contains(byPython, []byte("secret")) {
				t.Fatalf("Python now seals this form (%s): update schema/PARITY.md and schema.PortableMarks", byPython)
			}
			if sealedOther := strings.Contains(form.data, "other") && !bytes.Contains(byPython, []byte("other")); sealedOther != form.sealsOther {
				t.Fatalf("Python sealed %s; the row says it seals another field: %v", byPython, form.sealsOther)
			}
			s, err := schema.Compile("urn:x", doc)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.PortableMarks(); !errors.Is(err, schema.ErrMarkNotPortable) {
				t.Fatalf("PortableMarks: %v, want ErrMarkNotPortable", err)
			}
			reg, err := schema.NewRegistry(s)
			if err != nil {
				t.Fatal(err)
			}
			byGo, err := newFields(t, reg, newCipher(t, k)).ProtectData(ctx, "urn:x", []byte(form.data))
			if err != nil || bytes.Contains(byGo, []byte("secret")) {
				t.Fatalf("Go: %s %v", byGo, err)
			}
			a := python(t, map[string]any{"schema": doc, "data": json.RawMessage(byGo)}, "unprotect", b64(k))
			switch {
			case form.unprotectFails && !strings.HasPrefix(a.Error, "DecryptError"):
				t.Fatalf("Python's unprotect of Go's data: %+v; the row says it fails", a)
			case !form.unprotectFails && (a.Error != "" || bytes.Contains(a.Data, []byte("secret"))):
				t.Fatalf("Python's unprotect of Go's data: %+v; the row says its handler gets the ciphertext", a)
			}
		})
	}
}
