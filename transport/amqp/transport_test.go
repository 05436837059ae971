package amqp

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestTransport runs the behavioural kit against the real RabbitMQ.
func TestTransport(t *testing.T) {
	transporttest.Run(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
		// Classic queues only keep the redelivered flag, not a count.
		NativeRedeliveries: false,
	})
}

// TestRuntime runs the runtime's settlement cases end to end through RabbitMQ.
func TestRuntime(t *testing.T) {
	transporttest.RunRuntime(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
	})
}
