package amqp

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts queues on the real RabbitMQ with passive declares.
func TestStatsKit(t *testing.T) {
	transporttest.RunStats(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
		Prefetch: 1,
	}, transporttest.StatsOptions{})
}
