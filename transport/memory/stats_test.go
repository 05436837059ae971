package memory_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestStatsKit(t *testing.T) {
	transporttest.RunStats(t, transporttest.Config{
		Open: func(*testing.T) transport.Transport { return memory.New() },
	}, transporttest.StatsOptions{Oldest: transporttest.OldestCreatedAt})
}
