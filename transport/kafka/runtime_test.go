package kafka_test

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestRuntime runs the runtime's settlement cases (retry, dead letter, unknown URN,
// poison, typed handlers and keys) end to end against the real Kafka.
func TestRuntime(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	transporttest.RunRuntime(t, transporttest.Config{
		Open:        func(t *testing.T) transport.Transport { return openKafka(t) },
		NewQueue:    func(t *testing.T) string { return newTopic(t, "bqtest") },
		QuietPeriod: 2 * time.Second,
	})
}
