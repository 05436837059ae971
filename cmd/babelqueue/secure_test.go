package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// secureBroker is a secure variant of scripts/brokers.sh (TLS, its own users).
type secureBroker struct {
	name, env, service string
	prefix             string // the queue prefix its user may use
	query              func() string
	keys               bool
}

var secureBrokers = []secureBroker{
	{name: "redis", env: "BQ_REDIS_TLS_URL", service: "redis-tls", prefix: "bqsec"},
	{name: "rabbitmq", env: "BQ_AMQP_TLS_URL", service: "rabbitmq-tls", prefix: "bqsec"},
	{name: "kafka", env: "BQ_KAFKA_TLS_URL", service: "kafka-tls", prefix: "bqsec", keys: true,
		query: func() string { return "&group=" + transporttest.UniqueName("bqsec-cli") }},
	{name: "artemis", env: "BQ_ARTEMIS_TLS_URL", service: "artemis-tls", prefix: "bqsec"},
	{name: "pulsar", env: "BQ_PULSAR_TLS_URL", service: "pulsar-tls", prefix: "bqsec", keys: true},
}

func (b secureBroker) url(t *testing.T) string {
	raw := transporttest.BrokerURL(t, b.env, b.service)
	if b.query != nil {
		raw += b.query()
	}
	return raw
}

// TestSecureCLI runs the operating commands on every secure broker: dlq stats and
// dlq redrive, then consume, with the broker's secure URL; nothing they print shows a
// credential.
func TestSecureCLI(t *testing.T) {
	binary(t)
	for _, b := range secureBrokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			raw := b.url(t)
			q := transporttest.UniqueName(b.prefix)
			tr := openT(t, raw)
			s := dlqtest.Mixed(q, q+".dlq", 40, time.Now())
			for _, it := range s.Items {
				if !b.keys {
					it.Message.Key = nil
				}
			}
			seed(t, tr, s.Messages())
			secret := testSecret(raw)

			var st struct {
				Broker string `json:"broker"`
				dlq.Stats
			}
			cliJSON(t, &st, "dlq", "stats", "--json", "-queue", q, raw)
			if st.Total != 40 {
				t.Fatalf("dlq stats: %d messages, want 40", st.Total)
			}
			transporttest.NoSecretIn(t, "dlq stats", st.Broker, secret)

			moved := s.Count(func(it dlqtest.Item) bool { return !it.Poison })
			var res dlq.Result
			cliJSON(t, &res, "dlq", "redrive", "--json", "-queue", q, raw)
			if res.Moved != moved {
				t.Fatalf("dlq redrive moved %d, want %d", res.Moved, moved)
			}

			r := cli(t, "consume", "-json", "-n", fmt.Sprint(moved), "-idle", "20s", "-queue", q, raw)
			if r.code != 0 {
				t.Fatalf("consume: exit %d\n%s", r.code, r.stderr)
			}
			if got := strings.Count(strings.TrimSpace(r.stdout), "\n") + 1; got != moved {
				t.Errorf("consume printed %d messages, want %d", got, moved)
			}
			transporttest.NoSecretIn(t, "consume's output", r.stdout+r.stderr, secret)
		})
	}
}

// TestSecureCLIRefusesBadCredentials: a wrong password or a CA that did not sign the
// broker's certificate makes consume exit at once with one line naming the broker and
// the cause, and no credential.
func TestSecureCLIRefusesBadCredentials(t *testing.T) {
	binary(t)
	for _, b := range secureBrokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			raw := b.url(t)
			secret := testSecret(raw)
			bad := map[string]string{"wrong CA": transporttest.EditURL(t, raw, "", map[string]string{"tls_ca": transporttest.TLSFile(t, "other-ca.crt")})}
			if secret != "" && !strings.HasPrefix(raw, "pulsar") {
				bad["wrong password"] = transporttest.EditURL(t, raw, "not-the-password", nil)
			}
			for what, u := range bad {
				start := time.Now()
				r := cli(t, "consume", "-n", "1", "-queue", transporttest.UniqueName(b.prefix), u)
				took := time.Since(start)
				if r.code == 0 {
					t.Fatalf("%s: consume succeeded", what)
				}
				t.Logf("%s: exit %d after %s: %s", what, r.code, took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
				if took > 30*time.Second {
					t.Errorf("%s: consume took %s to give up", what, took)
				}
				if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.Contains(r.stderr, b.brokerWord()+": cannot connect to") {
					t.Errorf("%s: want one line naming %s and the cause, got:\n%s", what, b.brokerWord(), r.stderr)
				}
				transporttest.NoSecretIn(t, what, r.stdout+r.stderr, secret, "not-the-password")
			}
		})
	}
}

// brokerWord is how the driver names itself in errors.
func (b secureBroker) brokerWord() string {
	if b.name == "rabbitmq" {
		return "amqp"
	}
	return b.name
}

// TestSecureBridge moves a queue from the secure Redis to the secure RabbitMQ.
func TestSecureBridge(t *testing.T) {
	binary(t)
	src := transporttest.BrokerURL(t, "BQ_REDIS_TLS_URL", "redis-tls")
	dst := transporttest.BrokerURL(t, "BQ_AMQP_TLS_URL", "rabbitmq-tls")
	bridgeCase(t, src, dst, false, true, true, false) // text bodies: Redis frames headers only around UTF-8
}

// TestSecureOutboxRelay relays rows of the secure PostgreSQL to the secure Redis with
// outbox relay.
func TestSecureOutboxRelay(t *testing.T) {
	dsn := transporttest.BrokerURL(t, "BQ_POSTGRES_TLS_URL", "postgres-tls")
	redisURL := transporttest.BrokerURL(t, "BQ_REDIS_TLS_URL", "redis-tls")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := "bqsec_cli_" + transporttest.UniqueName("t")[2:]
	queue := transporttest.UniqueName("bqsec")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"outbox", "migrate", "-db", dsn, "-table", table}, &out, &errb); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errb.String())
	}
	store, err := pgstore.New(db, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	app, err := babelqueue.New(memory.New(), babelqueue.WithQueue(queue))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if _, err := outbox.NewWriter(app, store).Write(ctx, tx, "urn:babel:cli:test", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"outbox", "relay", "-db", dsn, "-table", table, "-drain", redisURL}, &out, &errb); code != 0 {
		t.Fatalf("relay: exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), fmt.Sprintf("published %d row(s)", n)) {
		t.Fatalf("relay output:\n%s", out.String())
	}
	transporttest.NoSecretIn(t, "the relay's output", out.String()+errb.String(), testSecret(dsn), testSecret(redisURL))
	if got := len(browse(t, openT(t, redisURL), queue)); got != n {
		t.Errorf("the secure Redis holds %d relayed messages, want %d", got, n)
	}
}

// testSecret is the password of a URL, or its token.
func testSecret(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.User != nil {
		p, _ := u.User.Password()
		return p
	}
	return u.Query().Get("token")
}

// TestConsoleCommandServesHTTPS: with -tls-cert and -tls-key the console serves HTTPS
// with that certificate (a client trusting the test CA reads it; plain HTTP gets
// nothing), and its session cookie is Secure.
func TestConsoleCommandServesHTTPS(t *testing.T) {
	crt, key := transporttest.TLSFile(t, "server.crt"), transporttest.TLSFile(t, "server.key")
	for _, bad := range [][]string{{"-tls-cert", crt}, {"-tls-key", key}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(append([]string{"console"}, bad...), "memory://#orders"), &out, &errb); code != 2 || !strings.Contains(errb.String(), "go together") {
			t.Errorf("%v: exit %d: %s", bad, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"console", "-tls-cert", crt, "-tls-key", crt, "memory://#orders"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), crt) {
		t.Errorf("a certificate given as its own key: exit %d: %s", code, errb.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr transporttest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "-listen", "127.0.0.1:0", "-token", "t0ken", "-tls-cert", crt, "-tls-key", key, "memory://#orders"}, io.Discard, &stderr)
	}()
	addr := regexp.MustCompile(`on https://127\.0\.0\.1:(\d+)/`)
	deadline := time.Now().Add(10 * time.Second)
	var port string
	for port == "" {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			port = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the console did not say where it listens: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tlsCfg, err := transport.TLSOptions{CAFile: transporttest.TLSFile(t, "ca.crt")}.Config()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	resp, err := hc.Get("https://localhost:" + port + "/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("login page over HTTPS: %d", resp.StatusCode)
	}
	var secure bool
	for _, c := range resp.Cookies() {
		secure = secure || (c.Name == "bq_console" && c.Secure && c.HttpOnly)
	}
	if !secure {
		t.Errorf("the session cookie is not Secure over HTTPS: %v", resp.Header.Values("Set-Cookie"))
	}
	if resp, err := http.Get("http://127.0.0.1:" + port + "/login"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on the HTTPS port answered %d", resp.StatusCode)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the console did not stop with its context")
	}
}
