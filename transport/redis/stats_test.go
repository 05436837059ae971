package redis_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts queues in both layouts: the processing list and the reserved
// set are what workers hold.
func TestStatsKit(t *testing.T) {
	for _, layout := range []struct{ name, query string }{
		{"default", ""},
		{"laravel", "?laravel=1&prefix=bqtest:"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			raw := brokerURL(t)
			t.Cleanup(func() { cleanKeys(t, client(t), "*bqtest-stats-*") })
			transporttest.RunStats(t, transporttest.Config{
				Open: func(t *testing.T) transport.Transport {
					tr, err := transport.Open(ctxT(t), raw+layout.query)
					if err != nil {
						t.Fatal(err)
					}
					return tr
				},
				NewQueue: func(*testing.T) string { return transporttest.UniqueName("bqtest-stats") },
				Prefetch: 1,
			}, transporttest.StatsOptions{AlwaysExists: true, Oldest: transporttest.OldestCreatedAt})
		})
	}
}
