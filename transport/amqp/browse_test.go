package amqp

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestBrowseKit runs the browse kit against the real RabbitMQ: get and requeue puts
// every message back at its place, so pages come in queue order and a consumer still
// receives each message once.
func TestBrowseKit(t *testing.T) {
	transporttest.RunBrowse(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
	}, transporttest.BrowseOptions{})
}
