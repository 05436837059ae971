package artemis_test

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts queues on the real Artemis through its management API: the
// message count less the messages delivered and scheduled is Ready, the age of the
// first message tells Oldest (from the creation-time the binding sets).
func TestStatsKit(t *testing.T) {
	cfg := kitConfig(t, true)
	cfg.Prefetch = 1
	transporttest.RunStats(t, cfg, transporttest.StatsOptions{Wait: 10 * time.Second, Oldest: transporttest.OldestCreatedAt})
}
