package artemis_test

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// clusterURL is the URL of the primary/backup pair scripts/brokers.sh starts as
// artemis-ha (both nodes listed; only the active one takes connections).
func clusterURL(t testing.TB) string {
	t.Helper()
	return transporttest.PairURL(t, "BQ_ARTEMIS_CLUSTER_URL", "artemis-ha")
}

// TestClusterKit runs the kit's groups on the pair, opened through its two-node URL as a
// user would: whichever node is active serves them. No node fails here
// (faults/artemis_cluster_test.go kills them, on a pair of its own).
func TestClusterKit(t *testing.T) {
	raw := clusterURL(t)
	open := func(t *testing.T) transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := transport.Open(ctx, raw)
		if err != nil {
			t.Fatalf("transport.Open: %v", err)
		}
		return tr
	}
	transporttest.RunAll(t, transporttest.Harness{
		Config: transporttest.Config{Open: open, NoKeys: true, NativeRedeliveries: true},
		Broker: "artemis",
		Stats:  transporttest.StatsOptions{Wait: 10 * time.Second, Oldest: transporttest.OldestCreatedAt},
		OpenWithLimit: func(t *testing.T, limit int) transport.Transport {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr, err := artemis.Open(ctx, raw, artemis.WithMaxMessageSize(limit))
			if err != nil {
				t.Fatalf("artemis.Open: %v", err)
			}
			return tr
		},
		OpenPipelined: func(t *testing.T) (direct, pipelined transport.Transport) { return open(t), open(t) },
		Without: map[transporttest.Case]string{
			transporttest.CaseSettleWriteFailure: "the settle-write outage cuts a proxy in front of one address; " +
				"the node failures of the pair are the fault suite's (faults/artemis_cluster_test.go)",
		},
		Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
			if c == transporttest.CaseStats {
				cfg.Prefetch = 1 // exact counts, as TestStatsKit
			}
		},
	})
}
