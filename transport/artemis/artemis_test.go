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

func TestTransportKit(t *testing.T) {
	transporttest.Run(t, kitConfig(t, true))
}

func TestRuntimeKit(t *testing.T) {
	transporttest.RunRuntime(t, kitConfig(t, true))
}

// The kits again with pipeline_settles=0: Settle waits for its writes.
func TestTransportKitNotPipelined(t *testing.T) {
	transporttest.Run(t, kitConfig(t, false))
}

func TestRuntimeKitNotPipelined(t *testing.T) {
	transporttest.RunRuntime(t, kitConfig(t, false))
}
