package artemis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureURL is the secure Artemis of scripts/brokers.sh (artemis-tls): one acceptor,
// AMQP over TLS, logins required; user bq (role bqrole) may do everything but manage.
func secureURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_ARTEMIS_TLS_URL", "artemis-tls")
}

func openSecure(t *testing.T, raw string) transport.Transport {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, raw)
	if err != nil {
		t.Fatalf("transport.Open: %v", err)
	}
	return tr
}

func TestSecureKit(t *testing.T) {
	raw := secureURL(t)
	transporttest.RunSecure(t, transporttest.Config{
		Open:               func(t *testing.T) transport.Transport { return openSecure(t, raw) },
		NewQueue:           func(*testing.T) string { return transporttest.UniqueName("bqsec") },
		NoKeys:             true,
		NativeRedeliveries: true,
	}, transporttest.SecureOptions{Browse: true})
}

// TestSecureRefusals: a wrong password, no user, an unknown CA, a wrong host name and
// plaintext on the TLS port each fail Open at once with one error naming the broker,
// the redacted address and the cause, and no secret in it or in the logs.
func TestSecureRefusals(t *testing.T) {
	raw := secureURL(t)
	pw := transporttest.URLPassword(raw)
	const wrong = "not-the-artemis-password"
	cases := []struct {
		name string
		url  string
		want error
		says string
	}{
		{"wrong password", transporttest.EditURL(t, raw, wrong, nil), transport.ErrAuth, "SASL PLAIN auth failed"},
		{"no user", strings.Replace(raw, "bq:"+pw+"@", "", 1), nil, ""},
		{"unknown CA", transporttest.EditURL(t, raw, "", map[string]string{"tls_ca": transporttest.TLSFile(t, "other-ca.crt")}), transport.ErrTLS, "unknown authority"},
		{"wrong host name", transporttest.EditURL(t, raw, "", map[string]string{"tls_server_name": "wrong.invalid"}), transport.ErrTLS, "not valid for the host name"},
		{"plain artemis:// on the TLS port", strings.Replace(transporttest.EditURL(t, raw, "", map[string]string{"tls_ca": ""}), "artemis+ssl://", "artemis://", 1), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := transporttest.OpenFails(t, tc.url, "artemis", tc.want, 20*time.Second, pw, wrong)
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// TestSecureDeadLetterRefused: user bqlim's role has no permission on addresses named
// <queue>.dlq. Sending to one is refused at its first use with one error naming the
// refusal; the runtime's dead-letter write is refused the same way, logged without a
// credential, and the message is not lost: it stays on its queue.
func TestSecureDeadLetterRefused(t *testing.T) {
	raw := secureURL(t)
	limited := strings.Replace(transporttest.EditURL(t, raw, "bq-artemis-limited-secret", nil), "//bq:", "//bqlim:", 1)
	q := transporttest.UniqueName("bqlim")
	var logs transporttest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(transport.ContextWithLogger(context.Background(), log), 60*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, limited)
	if err != nil {
		t.Fatalf("Open as bqlim: %v", err)
	}
	defer tr.Close(context.Background())
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Fatalf("publish to the role's own queue: %v", err)
	}
	start := time.Now()
	err = tr.Publish(ctx, &transport.Message{Queue: q + ".dlq", Body: []byte(`{}`)})
	if err == nil {
		t.Fatal("publish to the dead-letter address succeeded; want a refusal")
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.HasPrefix(err.Error(), "artemis:") || !errors.Is(err, transport.ErrAuth) {
		t.Errorf("error %q: want one artemis error matching ErrAuth", err)
	}

	app, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1), babelqueue.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	var failures atomic.Int32
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		failures.Add(1)
		return errors.New("billing is down")
	})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "settlement failed") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if !strings.Contains(logs.String(), "settlement failed") {
		t.Fatalf("the refused dead-letter write was not logged; logs:\n%s", logs.String())
	}
	transporttest.NoSecretIn(t, "the logs", logs.String(), "bq-artemis-limited-secret")
	if got := transporttest.DrainBodies(t, tr, q, 4, 3*time.Second); len(got) != 2 {
		t.Errorf("after the refused dead-letter write the queue holds %d distinct messages, want 2 (nothing lost): %v", len(got), got)
	}
}

// BenchmarkSecure: confirmed publish and consume on the plain Artemis and on
// artemis-tls (AMQP over TLS, a role user), timed in turns (transporttest.BenchSecure).
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
