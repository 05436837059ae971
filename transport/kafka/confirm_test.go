package kafka_test

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPublishConfirmedKit runs the confirmed-publish kit against the real Kafka: every
// record produced with a promise, all awaited.
func TestPublishConfirmedKit(t *testing.T) {
	brokerURL(t)
	transporttest.RunPublishConfirmed(t, transporttest.Config{
		Open:        func(t *testing.T) transport.Transport { return openKafka(t) },
		NewQueue:    func(t *testing.T) string { return newTopic(t, "bqtest-confirmed") },
		QuietPeriod: 2 * time.Second,
	})
}
