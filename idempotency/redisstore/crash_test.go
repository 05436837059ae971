package redisstore_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// redisBroker is the Redis broker with a one-second visibility timeout, so the
// reservation of a killed worker comes back within a second or two.
func redisBroker(t *testing.T) idempotencytest.Crash {
	// The queue's keys vanish once it is empty: nothing to delete.
	return idempotencytest.Crash{BrokerURL: redisURL(t) + "?retry_after=1", Spec: "reference", Open: openStore}
}

func rabbitBroker(t *testing.T) idempotencytest.Crash {
	url := transporttest.BrokerURL(t, "BQ_AMQP_URL", "rabbitmq")
	redisURL(t) // the store
	return idempotencytest.Crash{
		BrokerURL: url,
		Spec:      "reference",
		Open:      openStore,
		DeleteQueue: func(q string) {
			conn, err := amqp091.Dial(url)
			if err != nil {
				return
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return
			}
			for _, name := range []string{q, q + ".dlq", q + ".delay.250"} {
				_, _ = ch.QueueDelete(name, false, false, false)
			}
		},
	}
}

// A worker killed mid-handler in claim mode: the redelivery is requeued while the
// dead worker's claim holds, then runs once when the lease lapses.
func TestCrashMidHandler(t *testing.T) {
	redisBroker(t).Run(t, idempotencytest.KillMidHandler)
}

// End to end on two real brokers with the runtime: the worker dies after the handler,
// before the acknowledgement; the broker redelivers the message, and it has one effect.
func TestRedeliveryAfterHandlerHasOneEffect(t *testing.T) {
	t.Run("redis", func(t *testing.T) { redisBroker(t).Run(t, idempotencytest.KillAfterHandler) })
	t.Run("rabbitmq", func(t *testing.T) { rabbitBroker(t).Run(t, idempotencytest.KillAfterHandler) })
}
