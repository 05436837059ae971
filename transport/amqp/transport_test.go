package amqp

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestTransport runs the behavioural kit against the real RabbitMQ.
func TestTransport(t *testing.T) {
	cfg := transporttest.Config{
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
		// Classic queues only keep the redelivered flag, not a count.
		NativeRedeliveries:    false,
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	}
	// Breaking the settle writes takes the connection away: the consumer's channel dies
	// with it, so RabbitMQ requeues the delivery, and the consumer resumes once it is back.
	cfg.OpenThroughProxy(brokerURL(t), func(t *testing.T, u string) transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := Dial(ctx, u, WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		return tr
	})
	transporttest.Run(t, cfg)
}

// TestRuntime runs the runtime's settlement cases end to end through RabbitMQ.
func TestRuntime(t *testing.T) {
	transporttest.RunRuntime(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
	})
}
