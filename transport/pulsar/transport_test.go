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

// TestKit runs every group of the behavioural kit against the real Pulsar, with
// pipelined settle writes (the default) and with pipeline_settles=0 (Settle waits for
// its writes). Browse and counts go through the admin REST API on the default port next
// to the broker: the topic's entries before the subscription exists, then the
// subscription's backlog.
func TestKit(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "not-pipelined"}[pipelined], func(t *testing.T) {
			h := transporttest.Harness{
				Config: kitConfig(pipelined),
				Broker: "pulsar",
				Browse: transporttest.BrowseOptions{EmptyKeyIsNoKey: true},
				Stats:  transporttest.StatsOptions{Wait: 20 * time.Second, Oldest: transporttest.OldestWritten},
				// The limit asked of the kit is what is left for the message once the
				// client's own metadata (MetadataReserve) is set aside.
				OpenWithLimit: func(t *testing.T, limit int) transport.Transport {
					return openTransport(t, "", pulsar.WithMaxMessageSize(limit+pulsar.MetadataReserve))
				},
				OpenPipelined: func(t *testing.T) (direct, pipelined transport.Transport) {
					return openTransport(t, "", fastNack()), openTransport(t, "", fastNack(), pulsar.WithPipelinedSettles(true))
				},
				Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
					switch c {
					case transporttest.CaseStats:
						cfg.Prefetch = 1 // exact counts
					case transporttest.CasePublishConfirmed:
						cfg.EmptyKeyIsNoKey = true
					}
				},
			}
			if !pipelined {
				h.Without = map[transporttest.Case]string{
					transporttest.CaseBrowse:           "run once, with the default settings",
					transporttest.CaseStats:            "run once, with the default settings",
					transporttest.CasePipelined:        "run once, with the default settings",
					transporttest.CaseSizeLimit:        "run once, with the default settings",
					transporttest.CasePublishConfirmed: "run once, with the default settings (and with batching in TestPublishConfirmedBatching)",
				}
			}
			transporttest.RunAll(t, h)
		})
	}
}

// silentPulsarLog is the raw client's logger in tests.
func silentPulsarLog() pclog.Logger { return pclog.NewLoggerWithSlog(quietLogger()) }

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
