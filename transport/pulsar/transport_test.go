package pulsar_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"
	"testing"
	"time"

	pclog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// brokerURL is the Pulsar standalone the integration tests run against.
func brokerURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_PULSAR_URL", "pulsar")
}

// quietLogger keeps the Pulsar client's chatter out of the test log unless
// BQ_TEST_DEBUG=1.
func quietLogger() *slog.Logger {
	if os.Getenv("BQ_TEST_DEBUG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// openTransport opens a transport on the test broker with extra URL query and options.
func openTransport(t testing.TB, query string, opts ...pulsar.Option) *pulsar.Transport {
	t.Helper()
	raw := brokerURL(t)
	if query != "" {
		raw += "?" + query
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]pulsar.Option{pulsar.WithLogger(quietLogger())}, opts...)
	tr, err := pulsar.OpenURL(context.Background(), u, opts...)
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// kitConfig runs the shared kits against the test broker with the settle writes
// pipelined (the default) or, with pipelined false, with pipeline_settles=0.
func kitConfig(pipelined bool) transporttest.Config {
	query := "nack_delay=200ms"
	if !pipelined {
		query += "&pipeline_settles=0"
	}
	return transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			return openTransport(t, query)
		},
		NativeRedeliveries: true,
		QuietPeriod:        2 * time.Second,
		BreakSettleWrites: func(t *testing.T, tr transport.Transport) func() {
			return pulsar.FailSettleWrites(tr.(*pulsar.Transport), func(*transport.Message) error {
				return errors.New("settle writes broken by the test")
			})
		},
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	}
}

func TestTransport(t *testing.T) {
	transporttest.Run(t, kitConfig(true))
}

// The kits again with pipeline_settles=0: Settle waits for its writes.
func TestTransportKitNotPipelined(t *testing.T) {
	transporttest.Run(t, kitConfig(false))
}

func TestRuntimeKitNotPipelined(t *testing.T) {
	transporttest.RunRuntime(t, kitConfig(false))
}

// silentPulsarLog is the raw client's logger in tests.
func silentPulsarLog() pclog.Logger { return pclog.NewLoggerWithSlog(quietLogger()) }

func TestRuntime(t *testing.T) {
	transporttest.RunRuntime(t, kitConfig(true))
}

// fastNack makes rewound deliveries come back quickly in tests.
func fastNack() pulsar.Option { return pulsar.WithNackRedeliveryDelay(200 * time.Millisecond) }

// The runtime's retry is a re-publish, so max_attempts bounds it on an Exclusive
// subscription too, where the broker does not count redeliveries and delays are off.
func TestRuntimeExclusiveSubscription(t *testing.T) {
	cfg := kitConfig(true)
	cfg.Open = func(t *testing.T) transport.Transport {
		return openTransport(t, "subscription_type=exclusive")
	}
	transporttest.RunRuntime(t, cfg)
}
