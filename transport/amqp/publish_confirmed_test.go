package amqp

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPublishConfirmedKit runs the confirmed-publish kit against the real RabbitMQ:
// every publish of a batch in flight at once, the confirms awaited together.
func TestPublishConfirmedKit(t *testing.T) {
	transporttest.RunPublishConfirmed(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
	})
}
