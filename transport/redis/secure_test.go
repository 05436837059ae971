package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureURL is the secure Redis of scripts/brokers.sh (redis-tls): TLS only, client
// certificates required, the default user off, ACL user bq.
func secureURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_REDIS_TLS_URL", "redis-tls")
}

func TestSecureKit(t *testing.T) {
	raw := secureURL(t)
	transporttest.RunSecure(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			tr, err := transport.Open(ctxT(t), raw)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		NewQueue: func(*testing.T) string { return transporttest.UniqueName("bqsec") },
		NoKeys:   true,
	}, transporttest.SecureOptions{Browse: true})
}

// TestSecureRefusals: every bad credential or certificate fails Open at once with one
// error naming the broker, the redacted address and the cause, and no secret in it or
// in the logs.
func TestSecureRefusals(t *testing.T) {
	raw := secureURL(t)
	pw := transporttest.URLPassword(raw)
	const wrong = "not-the-redis-password"
	cases := []struct {
		name string
		url  string
		want error
		says string
	}{
		{"wrong password", transporttest.EditURL(t, raw, wrong, nil), transport.ErrAuth, "WRONGPASS"},
		{"no user (default user off)", strings.Replace(raw, "bq:"+pw+"@", "", 1), transport.ErrAuth, "NOAUTH"},
		{"unknown CA", transporttest.EditURL(t, raw, "", map[string]string{"tls_ca": transporttest.TLSFile(t, "other-ca.crt")}), transport.ErrTLS, "unknown authority"},
		{"wrong host name", transporttest.EditURL(t, raw, "", map[string]string{"tls_server_name": "wrong.invalid"}), transport.ErrTLS, "not valid for the host name"},
		{"no client certificate", transporttest.EditURL(t, raw, "", map[string]string{"tls_cert": "", "tls_key": ""}), transport.ErrTLS, "client certificate"},
		{"expired client certificate", transporttest.EditURL(t, raw, "", map[string]string{
			"tls_cert": transporttest.TLSFile(t, "client-expired.crt"), "tls_key": transporttest.TLSFile(t, "client-expired.key")}), transport.ErrTLS, "client certificate"},
		{"client certificate of another CA", transporttest.EditURL(t, raw, "", map[string]string{
			"tls_cert": transporttest.TLSFile(t, "client-other.crt"), "tls_key": transporttest.TLSFile(t, "client-other.key")}), transport.ErrTLS, "client certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := transporttest.OpenFails(t, tc.url, "redis", tc.want, 15*time.Second, pw, wrong)
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
	t.Run("plain redis:// on the TLS port", func(t *testing.T) {
		plain := strings.Replace(transporttest.EditURL(t, raw, "", map[string]string{
			"tls_ca": "", "tls_cert": "", "tls_key": "", "dial_timeout": "2s", "read_timeout": "2s"}), "rediss://", "redis://", 1)
		transporttest.OpenFails(t, plain, "redis", nil, 20*time.Second, pw)
	})
}

// TestSecureInsecureWarns: tls_insecure=1 connects without verifying and says so at
// Open, without the password.
func TestSecureInsecureWarns(t *testing.T) {
	raw := secureURL(t)
	u := transporttest.EditURL(t, raw, "", map[string]string{"tls_ca": "", "tls_insecure": "1"})
	tr, logs := transporttest.OpenWithLogger(t, u)
	if err := tr.Publish(context.Background(), &transport.Message{Queue: transporttest.UniqueName("bqsec"), Body: []byte(`{}`)}); err != nil {
		t.Fatalf("Publish over an unverified connection: %v", err)
	}
	if !strings.Contains(logs.String(), "verification is off") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("no warning at Open; logs:\n%s", logs)
	}
	transporttest.NoSecretIn(t, "the logs", logs.String(), transporttest.URLPassword(raw))
}

// TestSecureInteropPython: over TLS with client certificates and an ACL user, the
// Python SDK's runtime handles what the Go runtime publishes, and the Go runtime
// handles what Python publishes.
func TestSecureInteropPython(t *testing.T) {
	raw := secureURL(t)
	pyinterop.Python(t)
	script := pyinterop.Script(t, "redis_peer.py")

	t.Run("PythonToGo", func(t *testing.T) {
		q := transporttest.UniqueName("bqsec")
		produced := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, script, "produce", raw, q, "2"))
		seen := runGo(t, raw, q, 2)
		ids := map[string]bool{}
		for _, p := range produced {
			ids[p["id"].(string)] = true
		}
		for _, m := range seen {
			if !ids[m.ID()] || m.Envelope.Meta.Lang != "python" || m.Attempts != 0 {
				t.Errorf("Go handled %s (lang %s, attempts %d), not one Python produced", m.ID(), m.Envelope.Meta.Lang, m.Attempts)
			}
		}
	})
	t.Run("GoToPython", func(t *testing.T) {
		q := transporttest.UniqueName("bqsec")
		app, err := babelqueue.Open(ctxT(t), raw, babelqueue.WithQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		defer app.Close(context.Background())
		for i := range 2 {
			if _, err := app.Publish(ctxT(t), interopURN, map[string]any{"n": i, "from": "go"}); err != nil {
				t.Fatal(err)
			}
		}
		handled := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, script, "handle", raw, q, "2"))
		if len(handled) != 2 {
			t.Fatalf("python handled %v", handled)
		}
		for _, r := range handled {
			if r["lang"] != "go" || r["attempts"] != float64(0) {
				t.Errorf("python runtime saw %v", r)
			}
		}
	})
}

// BenchmarkSecure: confirmed publish and consume on the plain Redis and on redis-tls
// (TLS with a client certificate, an ACL user), timed in turns (transporttest.BenchSecure).
func BenchmarkSecure(b *testing.B) {
	plain, secure := brokerURL(b), secureURL(b)
	opener := func(raw string) func(b *testing.B) transport.Transport {
		return func(b *testing.B) transport.Transport {
			tr, err := transport.Open(context.Background(), raw)
			if err != nil {
				b.Fatal(err)
			}
			return tr
		}
	}
	transporttest.BenchSecure(b, transporttest.SecureBench{
		Plain: opener(plain), Secure: opener(secure),
		NewQueue: func() string { return transporttest.UniqueName("bqsec") },
	})
}
