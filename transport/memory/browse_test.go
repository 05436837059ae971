package memory_test

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestBrowse(t *testing.T) {
	transporttest.RunBrowse(t, transporttest.Config{
		Open:        func(*testing.T) transport.Transport { return memory.New() },
		QuietPeriod: 100 * time.Millisecond,
	}, transporttest.BrowseOptions{})
}
