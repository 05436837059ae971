package kafka_test

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
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureURL is the secure Kafka of scripts/brokers.sh (kafka-tls): SASL_SSL only,
// SCRAM-SHA-512 users, ACLs on; user bq may use topics, groups and transactional ids
// prefixed bqsec- only.
func secureURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_KAFKA_TLS_URL", "kafka-tls")
}

// openSecure opens the secure Kafka as raw's user with a group of the user's prefix.
func openSecure(t testing.TB, raw, prefix string) *kafka.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := kafka.Open(ctx, withParams(t, raw, "group", transporttest.UniqueName(prefix+"-group")), kafka.WithMetadataRefresh(2*time.Second))
	if err != nil {
		t.Fatalf("kafka.Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

func TestSecureKit(t *testing.T) {
	raw := secureURL(t)
	transporttest.RunSecure(t, transporttest.Config{
		Open:        func(t *testing.T) transport.Transport { return openSecure(t, raw, "bqsec") },
		NewQueue:    func(t *testing.T) string { return transporttest.UniqueName("bqsec") },
		QuietPeriod: 2 * time.Second,
	}, transporttest.SecureOptions{Browse: true})
}

// TestSecureRefusals: a wrong password, an unknown CA, a wrong host name, no TLS and no
// SASL each fail Open within the dial timeout, with one error naming the broker, the
// redacted address and the cause, and no secret in it or in the logs.
func TestSecureRefusals(t *testing.T) {
	raw := secureURL(t)
	pw := transporttest.URLPassword(raw)
	const wrong = "not-the-kafka-password"
	fast := map[string]string{"dial_timeout": "5s"}
	with := func(pass string, set map[string]string) string {
		for k, v := range fast {
			set[k] = v
		}
		return transporttest.EditURL(t, raw, pass, set)
	}
	cases := []struct {
		name string
		url  string
		want error
		says string
	}{
		{"wrong password", with(wrong, map[string]string{}), transport.ErrAuth, "SASL_AUTHENTICATION_FAILED"},
		{"unknown CA", with("", map[string]string{"tls_ca": transporttest.TLSFile(t, "other-ca.crt")}), transport.ErrTLS, "unknown authority"},
		{"wrong host name", with("", map[string]string{"tls_server_name": "wrong.invalid"}), transport.ErrTLS, "not valid for the host name"},
		{"no TLS", with("", map[string]string{"tls": "", "tls_ca": ""}), nil, ""},
		{"no SASL", strings.Replace(with("", map[string]string{"sasl": ""}), "bq:"+pw+"@", "", 1), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := transporttest.OpenFails(t, tc.url, "kafka", tc.want, 15*time.Second, pw, wrong)
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// TestSecureDeadLetterRefused: user bqlim may use topics and groups prefixed bqlim- only.
// With a dead-letter topic outside them, a write to it is refused at its first use
// with one error naming the refusal, and the runtime fails at Run, where the consumer
// makes sure of the dead-letter topic, instead of retrying for ever.
func TestSecureDeadLetterRefused(t *testing.T) {
	raw := secureURL(t)
	limited := strings.Replace(transporttest.EditURL(t, raw, "bq-kafka-limited-secret", nil), "//bq:", "//bqlim:", 1)
	tr := openSecure(t, limited, "bqlim")
	q := transporttest.UniqueName("bqlim")
	dlq := transporttest.UniqueName("bqother") + ".dlq"

	if err := tr.PublishConfirmed(ctxT(t), []*transport.Message{{Queue: q, Body: []byte(`{}`)}}); err != nil {
		t.Fatalf("publish to the user's own topic: %v", err)
	}
	err := tr.PublishConfirmed(ctxT(t), []*transport.Message{{Queue: dlq, Body: []byte(`{}`)}})
	if err == nil {
		t.Fatal("publish to a topic outside the user's ACLs succeeded")
	}
	t.Logf("refused: %v", err)
	if !errors.Is(err, transport.ErrAuth) || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("error %q: want the topic authorization refusal, matching ErrAuth", err)
	}

	var logs transporttest.LogBuffer
	app, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true), babelqueue.WithDeadLetterQueue(dlq),
		babelqueue.WithLogger(newSlog(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { handled.Add(1); return errors.New("no") })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err = app.Run(ctx)
	t.Logf("Run returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run: %v after %s; want an error at once, not a retry loop", err, time.Since(start))
	}
	if !errors.Is(err, transport.ErrAuth) {
		t.Errorf("Run's error %q does not match ErrAuth", err)
	}
	transporttest.NoSecretIn(t, "the error", err.Error(), "bq-kafka-limited-secret")
	transporttest.NoSecretIn(t, "the logs", logs.String(), "bq-kafka-limited-secret")
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSlog logs every level to w.
func newSlog(w *transporttest.LogBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// BenchmarkSecure: confirmed publish and consume on the plain Kafka and on kafka-tls
// (SASL/SCRAM-SHA-512 over TLS, ACLs on), timed in turns (transporttest.BenchSecure).
func BenchmarkSecure(b *testing.B) {
	plain, secure := brokerURL(b), secureURL(b)
	opener := func(raw string) func(b *testing.B) transport.Transport {
		return func(b *testing.B) transport.Transport { return openSecure(b, raw, "bqsec") }
	}
	transporttest.BenchSecure(b, transporttest.SecureBench{
		Plain: opener(plain), Secure: opener(secure),
		NewQueue: func() string { return transporttest.UniqueName("bqsec") },
	})
}
