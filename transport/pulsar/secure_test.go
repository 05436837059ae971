package pulsar_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureURL is the secure Pulsar of scripts/brokers.sh (pulsar-tls): TLS ports only,
// token authentication and authorisation on; role bq may produce and consume in
// public/default.
func secureURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_PULSAR_TLS_URL", "pulsar-tls")
}

func TestSecureKit(t *testing.T) {
	raw := secureURL(t)
	transporttest.RunSecure(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tr, err := transport.Open(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		NewQueue:           func(*testing.T) string { return transporttest.UniqueName("bqsec") },
		EmptyKeyIsNoKey:    true,
		NativeRedeliveries: true,
		QuietPeriod:        2 * time.Second,
	}, transporttest.SecureOptions{Browse: true, BrowseOptions: transporttest.BrowseOptions{EmptyKeyIsNoKey: true}})
}

// TestSecureRefusals: a token the broker did not sign, no token, an unknown CA, a wrong
// host name and plaintext on the TLS port each fail Open within the connect timeout,
// with one error naming the broker, the redacted address and the cause, and no token in
// it or in the logs.
func TestSecureRefusals(t *testing.T) {
	raw := secureURL(t)
	// A JWT signed with another key: {"alg":"HS256"}.{"sub":"bq"}.<signature>.
	const forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJicSJ9.c2lnbmVkLXdpdGgtYW5vdGhlci1rZXktYWJjZGVmZ2hpams"
	fast := func(set map[string]string) string {
		set["connect_timeout"] = "5s"
		return transporttest.EditURL(t, raw, "", set)
	}
	cases := []struct {
		name string
		url  string
		want error
		says string
	}{
		{"forged token", fast(map[string]string{"token_file": "", "token": forged}), transport.ErrAuth, "Failed to authenticate"},
		{"no token", fast(map[string]string{"token_file": ""}), transport.ErrAuth, "Failed to authenticate"},
		{"unknown CA", fast(map[string]string{"tls_ca": transporttest.TLSFile(t, "other-ca.crt")}), transport.ErrTLS, "unknown authority"},
		{"wrong host name", fast(map[string]string{"tls_server_name": "wrong.invalid"}), transport.ErrTLS, "not valid for the host name"},
		{"plain pulsar:// on the TLS port", strings.Replace(fast(map[string]string{"tls_ca": ""}), "pulsar+ssl://", "pulsar://", 1), nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := transporttest.OpenFails(t, tc.url, "pulsar", tc.want, 15*time.Second, forged, "eyJ")
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// BenchmarkSecure: confirmed publish and consume on the plain Pulsar and on pulsar-tls
// (TLS, token authentication), timed in turns (transporttest.BenchSecure).
func BenchmarkSecure(b *testing.B) {
	plain, secure := transporttest.BrokerURL(b, "BQ_PULSAR_URL", "pulsar"), secureURL(b)
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
