package pulsar_test

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts topics on the real Pulsar through its admin REST API: the
// topic's entries before the subscription exists, then the subscription's backlog.
func TestStatsKit(t *testing.T) {
	cfg := kitConfig(true)
	cfg.Prefetch = 1
	transporttest.RunStats(t, cfg, transporttest.StatsOptions{Wait: 20 * time.Second, Oldest: transporttest.OldestWritten})
}
