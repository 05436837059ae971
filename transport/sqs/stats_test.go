package sqs

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts queues on ElasticMQ with GetQueueAttributes.
func TestStatsKit(t *testing.T) {
	admin := openTest(t)
	transporttest.RunStats(t, transporttest.Config{
		NewQueue:       kitQueues(admin),
		Open:           func(t *testing.T) transport.Transport { return openTest(t) },
		TextBodiesOnly: true,
		ReceiveTimeout: 10 * time.Second,
		Prefetch:       1,
	}, transporttest.StatsOptions{})
}
