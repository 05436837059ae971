package pgstore_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// crash is a worker on RabbitMQ whose store is this run's reference table; the
// killed worker's unacknowledged message comes back when its connection drops.
func crash(t *testing.T) idempotencytest.Crash {
	url := transporttest.BrokerURL(t, "BQ_AMQP_URL", "rabbitmq")
	newStore(t, pgstore.LayoutReference) // reachable and migrated
	return idempotencytest.Crash{
		BrokerURL: url,
		Spec:      spec(pgstore.LayoutReference),
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
// dead worker's claim row holds, then runs once when the lease lapses.
func TestCrashMidHandler(t *testing.T) {
	crash(t).Run(t, idempotencytest.KillMidHandler)
}

// The worker dies after the handler, before the acknowledgement: RabbitMQ redelivers
// the message, and it has one effect.
func TestRedeliveryAfterHandlerHasOneEffect(t *testing.T) {
	crash(t).Run(t, idempotencytest.KillAfterHandler)
}
