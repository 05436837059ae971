package kafka_test

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts topics from their offsets on the real Kafka: what the group
// has not committed is Ready, the end offsets add up to Appended.
func TestStatsKit(t *testing.T) {
	brokerURL(t)
	transporttest.RunStats(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openKafka(t) },
		NewQueue: func(t *testing.T) string { return newTopic(t, "bqtest-stats") },
		Prefetch: 1,
	}, transporttest.StatsOptions{ReadyCountsInFlight: true, Wait: 20 * time.Second, Oldest: transporttest.OldestCreatedAt})
}
