package amqp

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureURL is the secure RabbitMQ of scripts/brokers.sh (rabbitmq-tls): TLS only with
// peer verification (client certificates required), user bq allowed the vhost bqsecure
// only, no guest.
func secureURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_AMQP_TLS_URL", "rabbitmq-tls")
}

// secureQueue returns a fresh queue name (prefix bqlim, the one the limited user may
// use) deleted with its dead-letter queue when the test ends.
func secureQueue(t testing.TB, raw string) string {
	t.Helper()
	q := transporttest.UniqueName("bqlim")
	t.Cleanup(func() {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		pq, err := driverkit.ParseQuery("amqp", u)
		if err != nil {
			return
		}
		cfg, err := pq.TLS(true, tlsAliases)
		if err != nil {
			return
		}
		c := *u
		c.RawQuery = ""
		conn, err := amqp091.DialTLS(c.String(), cfg)
		if err != nil {
			return
		}
		defer conn.Close()
		for _, n := range []string{q, q + ".dlq"} {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(n, false, false, false)
				_ = ch.Close()
			}
		}
	})
	return q
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
		NewQueue: func(t *testing.T) string { return secureQueue(t, raw) },
		NoKeys:   true,
	}, transporttest.SecureOptions{Browse: true})
}

// TestSecureRefusals: every bad credential or certificate fails Open at once with one
// error naming the broker, the redacted address and the cause, and no secret in it or
// in the logs.
func TestSecureRefusals(t *testing.T) {
	raw := secureURL(t)
	pw := transporttest.URLPassword(raw)
	const wrong = "not-the-rabbit-password"
	file := func(name string) string { return transporttest.TLSFile(t, name) }
	cases := []struct {
		name string
		url  string
		want error
		says string
	}{
		{"wrong password", transporttest.EditURL(t, raw, wrong, nil), transport.ErrAuth, "username or password not allowed"},
		{"vhost not allowed", strings.Replace(raw, "/bqsecure?", "/?", 1), transport.ErrAuth, "access to vhost '/' refused"},
		{"unknown CA", transporttest.EditURL(t, raw, "", map[string]string{"tls_ca": file("other-ca.crt")}), transport.ErrTLS, "unknown authority"},
		{"wrong host name", transporttest.EditURL(t, raw, "", map[string]string{"tls_server_name": "wrong.invalid"}), transport.ErrTLS, "not valid for the host name"},
		{"no client certificate", transporttest.EditURL(t, raw, "", map[string]string{"tls_cert": "", "tls_key": ""}), transport.ErrTLS, "client certificate"},
		{"expired client certificate", transporttest.EditURL(t, raw, "", map[string]string{
			"tls_cert": file("client-expired.crt"), "tls_key": file("client-expired.key")}), transport.ErrTLS, "client certificate"},
		{"client certificate of another CA", transporttest.EditURL(t, raw, "", map[string]string{
			"tls_cert": file("client-other.crt"), "tls_key": file("client-other.key")}), transport.ErrTLS, "client certificate"},
		{"plain amqp:// on the TLS port", strings.Replace(transporttest.EditURL(t, raw, "", map[string]string{
			"tls_ca": "", "tls_cert": "", "tls_key": "", "connection_timeout": "3000"}), "amqps://", "amqp://", 1), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := transporttest.OpenFails(t, tc.url, "amqp", tc.want, 15*time.Second, pw, wrong)
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// TestSecureDeadLetterRefused: a user whose permissions do not reach the dead-letter
// queue (bqlimited: queues bqlim-<hex> only). Writing to it fails at its first use with
// one error naming the broker and the refusal; the runtime's dead-letter write is
// refused the same way, logged without a credential, and the message is not lost: it
// stays on its queue.
func TestSecureDeadLetterRefused(t *testing.T) {
	raw := secureURL(t)
	limited := strings.Replace(transporttest.EditURL(t, raw, "bq-limited-secret", nil), "//bq:", "//bqlimited:", 1)
	q := secureQueue(t, raw)

	var logs transporttest.LogBuffer
	ctx := transport.ContextWithLogger(ctxT(t), newSlog(&logs))
	tr, err := transport.Open(ctx, limited)
	if err != nil {
		t.Fatalf("Open as bqlimited: %v", err)
	}
	defer tr.Close(context.Background())
	if err := tr.Publish(ctxT(t), &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Fatalf("publish to the user's own queue: %v", err)
	}
	start := time.Now()
	err = tr.Publish(ctxT(t), &transport.Message{Queue: q + ".dlq", Body: []byte(`{}`)})
	if err == nil {
		t.Fatal("publish to the dead-letter queue succeeded; want ACCESS_REFUSED")
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.HasPrefix(err.Error(), "amqp:") || !strings.Contains(err.Error(), "ACCESS_REFUSED") || !errors.Is(err, transport.ErrAuth) {
		t.Errorf("error %q: want one amqp error with the refusal, matching ErrAuth", err)
	}
	transporttest.NoSecretIn(t, "the error", err.Error(), "bq-limited-secret")

	// The runtime: the dead-letter write is refused; the delivery goes back.
	app, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1),
		babelqueue.WithLogger(newSlog(&logs)))
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
	if _, err := app.Publish(ctxT(t), "urn:babel:orders:created", map[string]int{"order_id": 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "ACCESS_REFUSED") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if !strings.Contains(logs.String(), "ACCESS_REFUSED") {
		t.Fatalf("the refused dead-letter write was not logged; logs:\n%s", logs.String())
	}
	transporttest.NoSecretIn(t, "the logs", logs.String(), "bq-limited-secret")
	// Still there: the first message published above and the one that failed.
	if got := transporttest.DrainBodies(t, tr, q, 4, 2*time.Second); len(got) != 2 {
		t.Errorf("after the refused dead-letter write the queue holds %d distinct messages, want 2 (nothing lost): %v", len(got), got)
	}
}

// newSlog logs every level to w.
func newSlog(w *transporttest.LogBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestSecureInteropPython: over TLS with client certificates, the Python SDK's worker
// handles what the Go runtime publishes, and the Go runtime handles what Python
// publishes, envelopes intact.
func TestSecureInteropPython(t *testing.T) {
	raw := secureURL(t)
	pyinterop.Python(t)
	open := func() *babelqueue.App {
		a, err := babelqueue.Open(ctxT(t), raw, babelqueue.WithQueue(secureQueue(t, raw)), babelqueue.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		return a
	}

	t.Run("GoToPython", func(t *testing.T) {
		a := open()
		id, err := a.Publish(ctxT(t), "urn:babel:orders:created", map[string]any{"order_id": 1042, "note": "café ☕"})
		if err != nil {
			t.Fatal(err)
		}
		seen := peer(t, nil, "consume", raw, a.Queue(), "--urn", "urn:babel:orders:created")
		if len(seen) != 1 || str(obj(seen[0]["meta"])["id"]) != id || str(obj(seen[0]["meta"])["lang"]) != "go" ||
			obj(seen[0]["data"])["note"] != "café ☕" {
			t.Fatalf("python handled %v, want the one Go message %s", seen, id)
		}
	})
	t.Run("PythonToGo", func(t *testing.T) {
		a := open()
		ids := peer(t, []byte(`{"urn":"urn:babel:orders:created","data":{"order_id":7}}`+"\n"), "publish", raw, a.Queue())
		if len(ids) != 1 {
			t.Fatalf("python published %v", ids)
		}
		got := make(chan *babelqueue.Message, 1)
		a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error { got <- m; return nil })
		stop := runApp(t, a)
		defer stop()
		select {
		case m := <-got:
			if m.ID() != str(ids[0]["id"]) || m.Envelope.Meta.Lang != "python" || m.Attempts != 0 {
				t.Errorf("Go handled %s (lang %s, attempts %d), want %v from python", m.ID(), m.Envelope.Meta.Lang, m.Attempts, ids[0]["id"])
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Go did not receive the message Python published")
		}
	})
}

// BenchmarkSecure: confirmed publish and consume on the plain RabbitMQ and on
// rabbitmq-tls (TLS with peer verification, a vhost user), timed in turns
// (transporttest.BenchSecure).
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
		NewQueue: func() string {
			q := secureQueue(b, secure)
			b.Cleanup(func() { deleteQueues(plain, q) })
			return q
		},
	})
}
