package artemis_test

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
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
// artemis:// scheme as a user would.
func kitConfig(t *testing.T) transporttest.Config {
	raw := brokerURL(t)
	var proxies sync.Map // transport.Transport → *faultproxy.Proxy
	return transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			p, err := faultproxy.New(u.Host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			u.Host = p.Addr()
			tr, err := transport.Open(ctx, u.String())
			if err != nil {
				t.Fatalf("transport.Open: %v", err)
			}
			proxies.Store(tr, p)
			return tr
		},
		NoKeys:             true,
		NativeRedeliveries: true,
		// The connection goes away: the settle writes fail and the receiver's link
		// with it, so Artemis gives the delivery back; the consumer attaches again once
		// the broker is back.
		BreakSettleWrites: func(_ *testing.T, tr transport.Transport) func() {
			p, _ := proxies.Load(tr)
			p.(*faultproxy.Proxy).Down()
			return p.(*faultproxy.Proxy).Up
		},
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	}
}

func TestTransportKit(t *testing.T) {
	transporttest.Run(t, kitConfig(t))
}

func TestRuntimeKit(t *testing.T) {
	transporttest.RunRuntime(t, kitConfig(t))
}
