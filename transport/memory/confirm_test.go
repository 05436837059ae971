package memory_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The memory broker's Publish is confirmed, so transport.PublishConfirmed falls back
// to it one message at a time.
func TestPublishConfirmedKit(t *testing.T) {
	transporttest.RunPublishConfirmed(t, transporttest.Config{
		Open: func(*testing.T) transport.Transport { return memory.New() },
	})
}
