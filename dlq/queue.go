package dlq

import (
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// QueueFor names the dead-letter queue the runtime writes the dead letters of queue
// to on a broker with the capabilities caps, when no dead-letter queue was named:
// queue plus the broker's suffix (".dlq" by default), the suffix going before a FIFO
// suffix ("orders.fifo" is "orders.dlq.fifo" on SQS). It is the name
// [babelqueue.App.DeadLetterQueue] reports for an app with the default options.
func QueueFor(queue string, caps transport.Capabilities) string {
	return settle.DeadLetterQueue(queue, "", "", caps)
}
