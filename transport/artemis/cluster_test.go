package artemis_test

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// clusterURL is the URL of the primary/backup pair scripts/brokers.sh starts as
// artemis-ha (both nodes listed; only the active one takes connections).
func clusterURL(t testing.TB) string {
	t.Helper()
	return transporttest.PairURL(t, "BQ_ARTEMIS_CLUSTER_URL", "artemis-ha")
}

// The kits' main cases on the pair, opened through its two-node URL as a user would:
// whichever node is active serves them. No node fails here (faults/artemis_cluster_test.go
// kills them, on a pair of its own), so the settle-write outage case, which needs a
// proxy in front of one address, is left out.
func clusterKitConfig(t *testing.T) transporttest.Config {
	raw := clusterURL(t)
	return transporttest.Config{
		NoKeys:                true,
		NativeRedeliveries:    true,
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
		Open: func(t *testing.T) transport.Transport {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr, err := transport.Open(ctx, raw)
			if err != nil {
				t.Fatalf("transport.Open: %v", err)
			}
			return tr
		},
	}
}

func TestClusterTransportKit(t *testing.T) {
	transporttest.Run(t, clusterKitConfig(t))
}

func TestClusterRuntimeKit(t *testing.T) {
	transporttest.RunRuntime(t, clusterKitConfig(t))
}
