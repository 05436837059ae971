package transporttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

// SecureOptions describes a run of [RunSecure].
type SecureOptions struct {
	// Browse runs the browse case (the transport can page a queue over this
	// connection).
	Browse bool
	// BrowseOptions are the broker's browse options when Browse is set.
	BrowseOptions BrowseOptions
}

// RunSecure runs the kit's main cases through a transport cfg opens on a broker that
// requires TLS and its own users (the secure variants of scripts/brokers.sh): publish,
// receive and acknowledge; rewind; confirmed settle writes; a handled message; retry
// then dead letter; poison; redrive back from the dead-letter queue; and, with
// opts.Browse, browse.
func RunSecure(t *testing.T, cfg Config, opts SecureOptions) {
	cfg.defaults()
	cases := []kitCase{
		{"PublishReceiveAck", testPublishReceiveAck},
		{"RewindRedelivers", testRewind},
		{"ConfirmedSettleWrites", testConfirmedWrites},
		{"HandledIsAcked", rtHandled},
		{"RetryThenDeadLetter", rtRetryThenDeadLetter},
		{"PoisonDeadLettered", rtPoison},
		{"Redrive", secureRedrive},
	}
	if opts.Browse {
		cases = append(cases, kitCase{"Browse", func(t *testing.T, cfg Config) { testBrowsePages(t, cfg, opts.BrowseOptions) }})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, cfg) })
	}
}

// secureRedrive dead-letters a message, redrives it with dlq.Redrive and sees it
// handled on its queue with attempts back at 0.
func secureRedrive(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1))
	var failing atomic.Bool
	failing.Store(true)
	var failed, handled atomic.Int32
	var attempts atomic.Int32
	attempts.Store(-1)
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		if failing.Load() {
			failed.Add(1)
			return errors.New("billing is down")
		}
		attempts.Store(int32(m.Attempts))
		handled.Add(1)
		return nil
	})
	stop := run(t, a)
	defer stop()
	if _, err := a.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, cfg.ReceiveTimeout, "the failure", func() bool { return failed.Load() == 1 })
	// The dead-letter write follows the handler's failure: a redrive that browses first
	// must not look before it landed.
	waitFor(t, cfg.ReceiveTimeout, "the dead letter", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := transport.Browse(ctx, a.Transport(), a.DeadLetterQueue(), "", 10)
		return errors.Is(err, transport.ErrCannotPeek) || (err == nil && len(p.Deliveries) == 1)
	})
	failing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.ReceiveTimeout)
	defer cancel()
	res, err := dlq.Redrive(ctx, a.Transport(), a.DeadLetterQueue(), dlq.WithIdle(cfg.QuietPeriod), dlq.WithStartTimeout(cfg.ReceiveTimeout))
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if res.Moved != 1 || res.To[q] != 1 {
		t.Fatalf("Redrive moved %d (to %v), want 1 to %q", res.Moved, res.To, q)
	}
	waitFor(t, cfg.ReceiveTimeout, "the redriven message", func() bool { return handled.Load() == 1 })
	if got := attempts.Load(); got != 0 {
		t.Errorf("the redriven message came with attempts %d, want 0", got)
	}
}

// NoSecretIn fails t when text (captured logs, an error's text) holds any of secrets.
func NoSecretIn(t testing.TB, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s holds a credential (%d bytes of it): %s", what, len(s), strings.ReplaceAll(text, s, "<SECRET>"))
		}
	}
}

// OpenFails opens rawURL, which must fail within limit (a refused credential or
// certificate: never a hang or an endless retry), with one error that names broker,
// matches want (transport.ErrTLS, transport.ErrAuth, or nil for any) and holds no
// secret; the logs written meanwhile must hold none either. It returns the error.
func OpenFails(t *testing.T, rawURL, broker string, want error, limit time.Duration, secrets ...string) error {
	t.Helper()
	var logs LogBuffer
	ctx, cancel := context.WithTimeout(context.Background(), limit+30*time.Second)
	defer cancel()
	ctx = transport.ContextWithLogger(ctx, newBufferLogger(&logs))
	start := time.Now()
	tr, err := transport.Open(ctx, rawURL)
	took := time.Since(start)
	if err == nil {
		_ = tr.Close(context.Background())
		t.Fatalf("Open(%s) succeeded; want a refusal", transport.Redact(rawURL))
	}
	if took > limit {
		t.Errorf("Open took %s to fail, more than %s", took.Round(time.Millisecond), limit)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, broker+":") {
		t.Errorf("error %q does not start with the broker %q", msg, broker)
	}
	if want != nil && !errors.Is(err, want) {
		t.Errorf("error %q does not match %v", msg, want)
	}
	if !strings.Contains(msg, "127.0.0.1") && !strings.Contains(msg, "localhost") {
		t.Errorf("error %q does not name the address", msg)
	}
	if strings.Count(msg, broker+": cannot connect") > 1 {
		t.Errorf("error %q repeats itself", msg)
	}
	t.Logf("Open failed after %s: %v", took.Round(time.Millisecond), err)
	NoSecretIn(t, "the error", msg, secrets...)
	NoSecretIn(t, "the logs", logs.String(), secrets...)
	return err
}

// newBufferLogger logs every level to w, so a scan for secrets sees Debug lines too.
func newBufferLogger(w *LogBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TLSFile returns the path of a file of the test PKI (scripts/certs.sh) in $BQ_TLS_DIR,
// failing under CI=true (skipping elsewhere) when it is not there.
func TLSFile(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("BQ_TLS_DIR")
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); dir == "" || err != nil {
		msg := fmt.Sprintf("the test certificates are not in BQ_TLS_DIR=%q; run `scripts/brokers.sh up` and `eval \"$(scripts/brokers.sh env)\"`", dir)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: integration tests never skip)", msg)
		}
		t.Skip(msg)
	}
	return p
}

// EditURL returns rawURL with its password replaced by pass (unless pass is "") and
// the query parameters of set set; an empty value removes a parameter.
func EditURL(t testing.TB, rawURL, pass string, set map[string]string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("EditURL: %v", err)
	}
	if pass != "" && u.User != nil {
		u.User = url.UserPassword(u.User.Username(), pass)
	}
	q := u.Query()
	for k, v := range set {
		if v == "" {
			q.Del(k)
		} else {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// URLPassword returns the password of rawURL ("" when it has none).
func URLPassword(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}
