package pgstore_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureDSN is the secure PostgreSQL of scripts/brokers.sh (postgres-tls): TLS only,
// password logins (scram-sha-256) for role bqsecure.
func secureDSN(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_POSTGRES_TLS_URL", "postgres-tls")
}

// TestSecureStore: the store claims, remembers and forgets over TLS (sslmode=verify-full
// against the test CA).
func TestSecureStore(t *testing.T) {
	dsn := secureDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := "bqsec_idemp_" + transporttest.UniqueName("t")[2:]
	s, err := pgstore.New(ctx, dsn, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Cleanup(func() {
		if db, err := sql.Open("pgx", dsn); err == nil {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + table)
			_ = db.Close()
		}
	})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	id := "0b6f3f0e-3a4e-4a8e-9d3b-2b0e5c1f7a11"
	c, err := s.Claim(ctx, id, time.Minute)
	if err != nil || c.Status != idempotency.Claimed {
		t.Fatalf("Claim of a new id: %+v, %v", c, err)
	}
	if err := s.Remember(ctx, id); err != nil {
		t.Fatal(err)
	}
	if seen, err := s.Seen(ctx, id); err != nil || !seen {
		t.Fatalf("Seen after Remember: %v, %v", seen, err)
	}
	if c, err := s.Claim(ctx, id, time.Minute); err != nil || c.Status != idempotency.Remembered {
		t.Fatalf("Claim of a remembered id: %+v, %v; want it refused", c, err)
	}
}

// TestSecureRefusals: a wrong password, a CA that did not sign the server's certificate
// and a connection without TLS each fail New at once, with an error that names the
// store and the cause and holds no password.
func TestSecureRefusals(t *testing.T) {
	dsn := secureDSN(t)
	pw := transporttest.URLPassword(dsn)
	const wrong = "not-the-postgres-password"
	cases := []struct{ name, dsn, says string }{
		{"wrong password", transporttest.EditURL(t, dsn, wrong, nil), "password authentication failed"},
		{"unknown CA", transporttest.EditURL(t, dsn, "", map[string]string{"sslrootcert": transporttest.TLSFile(t, "other-ca.crt")}), "unknown authority"},
		{"no TLS", transporttest.EditURL(t, dsn, "", map[string]string{"sslmode": "disable", "sslrootcert": ""}), "no encryption"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			s, err := pgstore.New(ctx, transporttest.EditURL(t, tc.dsn, "", map[string]string{"connect_timeout": "5"}))
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded; want a refusal")
			}
			t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
			if time.Since(start) > 15*time.Second {
				t.Errorf("New took %s to fail", time.Since(start))
			}
			msg := err.Error()
			u, _ := url.Parse(dsn)
			if !strings.HasPrefix(msg, "pgstore:") || !strings.Contains(msg, tc.says) || !strings.Contains(msg, u.Hostname()) {
				t.Errorf("error %q: want the store, the address and %q", msg, tc.says)
			}
			transporttest.NoSecretIn(t, "the error", msg, pw, wrong)
		})
	}
}
