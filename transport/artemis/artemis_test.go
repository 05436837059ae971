package artemis_test

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// brokerURL is the URL of the Artemis the integration tests run against.
func brokerURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_ARTEMIS_URL", "artemis")
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openTransport opens a transport on the test broker and closes it with the test.
func openTransport(t testing.TB, opts ...artemis.Option) *artemis.Transport {
	t.Helper()
	raw := brokerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := artemis.Open(ctx, raw, append([]artemis.Option{artemis.WithLogger(quiet())}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// kitConfig runs the shared kits against the test broker, opening through the
// artemis:// scheme as a user would, with the settle writes pipelined (the default) or,
// with pipelined false, with pipeline_settles=0.
func kitConfig(t *testing.T, pipelined bool) transporttest.Config {
	cfg := transporttest.Config{
		NoKeys:                true,
		NativeRedeliveries:    true,
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	}
	// Breaking the settle writes takes the connection away: the receiver's link goes
	// with it, so Artemis gives the delivery back, and the consumer attaches again once
	// the broker is back.
	raw := brokerURL(t)
	if !pipelined {
		raw = withQuery(t, raw, "pipeline_settles", "0")
	}
	cfg.OpenThroughProxy(raw, func(t *testing.T, u string) transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := transport.Open(ctx, u)
		if err != nil {
			t.Fatalf("transport.Open: %v", err)
		}
		return tr
	})
	return cfg
}

// withQuery returns raw with the query parameter name set to value.
func withQuery(t testing.TB, raw, name, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestKit runs every group of the behavioural kit against the real Artemis, with
// pipelined settle writes (the default) and with pipeline_settles=0 (Settle waits for
// its writes). A copy-mode receiver browses the queue in order and takes nothing; counts
// come from the management API (the message count less the messages delivered and
// scheduled is Ready; Oldest from the creation-time the binding sets).
func TestKit(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "not-pipelined"}[pipelined], func(t *testing.T) {
			h := transporttest.Harness{
				Config: kitConfig(t, pipelined),
				Broker: "artemis",
				Stats:  transporttest.StatsOptions{Wait: 10 * time.Second, Oldest: transporttest.OldestCreatedAt},
				OpenWithLimit: func(t *testing.T, limit int) transport.Transport {
					return openTransport(t, artemis.WithMaxMessageSize(limit), artemis.WithPipelinedSettles(pipelined))
				},
				OpenPipelined: func(t *testing.T) (direct, pipelined transport.Transport) {
					return openTransport(t), openTransport(t, artemis.WithPipelinedSettles(true))
				},
				Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
					if c == transporttest.CaseStats {
						cfg.Prefetch = 1 // exact counts
					}
				},
			}
			if !pipelined {
				// Browse, stats and the pipelined groups do not depend on how Settle waits.
				h.Without = map[transporttest.Case]string{
					transporttest.CaseBrowse:    "run once, with the default settings",
					transporttest.CaseStats:     "run once, with the default settings",
					transporttest.CasePipelined: "run once, with the default settings",
					transporttest.CaseSizeLimit: "run once, with the default settings",
				}
			}
			transporttest.RunAll(t, h)
		})
	}
}
