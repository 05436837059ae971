package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
)

// TestOneURLForm: every command that takes a broker URL reads URL#queue the same way,
// or refuses it with a clear error; none ignores it. memory:// is enough to see which
// queue a command works on.
func TestOneURLForm(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		// The dlq commands: a work queue means its dead-letter queue; a dead-letter
		// queue's own name means it.
		{[]string{"dlq", "stats", "memory://#orders"}, 0, "Dead-letter queue orders.dlq on memory:"},
		{[]string{"dlq", "stats", "memory://#orders.dlq"}, 0, "Dead-letter queue orders.dlq on memory:"},
		{[]string{"dlq", "stats", "-queue", "orders", "memory://#orders.dlq"}, 0, "Dead-letter queue orders.dlq"},
		{[]string{"dlq", "stats", "-dlq", "orders.dlq", "memory://#orders"}, 0, "Dead-letter queue orders.dlq"},
		{[]string{"dlq", "stats", "memory://"}, 0, "Dead-letter queue default.dlq"},
		{[]string{"dlq", "ls", "memory://#payments"}, 0, "Dead-letter queue payments.dlq"},
		{[]string{"dlq", "show", "memory://#payments", "#1"}, 1, "payments.dlq holds 0 message(s)"},
		{[]string{"dlq", "redrive", "-dry-run", "memory://#payments"}, 0, "from payments.dlq on memory:"},
		{[]string{"redrive", "-dry-run", "memory://#payments.dlq"}, 0, "from payments.dlq on memory:"},
		{[]string{"dlq", "export", "-o", "-", "memory://#payments"}, 0, "of payments.dlq on memory:"},
		{[]string{"dlq", "purge", "-all", "memory://#payments"}, 0, "would remove 0 message(s) of payments.dlq"},
		{[]string{"dlq", "import", "-dry-run", "/dev/null", "memory://#payments"}, 0, "would import 0 record(s)"},
		{[]string{"dlq", "import", "-to", "x.dlq", "/dev/null", "memory://#payments"}, 2, "#payments.dlq in the URL and -to x.dlq"},
		// Named twice, differently, or a list where one queue is meant: refused.
		{[]string{"dlq", "stats", "-queue", "billing", "memory://#orders"}, 2, "#orders in the URL means orders.dlq, the flags mean billing.dlq"},
		{[]string{"dlq", "purge", "-all", "-dlq", "x.dlq", "memory://#orders.dlq"}, 2, "named twice"},
		{[]string{"dlq", "stats", "memory://#orders,payments"}, 2, "#orders,payments names several queues"},
		// publish and consume: the queue itself.
		{[]string{"publish", "-urn", "urn:babel:x", "memory://#orders"}, 0, "published urn:babel:x to orders"},
		{[]string{"publish", "-urn", "urn:babel:x", "-queue", "orders", "memory://#orders"}, 0, "to orders"},
		{[]string{"publish", "-urn", "urn:babel:x", "-queue", "billing", "memory://#orders"}, 2, "#orders in the URL and -queue billing"},
		{[]string{"consume", "-n", "1", "-idle", "50ms", "-queue", "billing", "memory://#orders"}, 2, "#orders in the URL and -queue billing"},
		{[]string{"consume", "-n", "1", "-idle", "50ms", "memory://#a,b"}, 2, "names several queues"},
		// bridge: the source queue on the first URL, the destination's on the second.
		{[]string{"bridge", "-copy", "memory://#orders", "memory://#archive"}, 0, "copied 0 message(s) from orders on memory: to archive on memory:"},
		{[]string{"bridge", "-copy", "-to-queue", "x", "memory://#orders", "memory://#archive"}, 2, "#archive in the URL and -to-queue x"},
		{[]string{"bridge", "-copy", "memory://", "memory://"}, 2, "-queue is required (or SRC_URL#queue)"},
		// stats, like console and tail, counts the queues the URL names.
		{[]string{"stats", "memory://#orders"}, 0, "orders.dlq"},
		// The relay publishes each row to its own queue: a #queue is refused.
		{[]string{"outbox", "relay", "-db", "postgres://nowhere", "memory://#orders"}, 2, "names a queue (#orders)"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		all := out.String() + errb.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d containing %q", tc.args, code, all, tc.code, tc.want)
		}
	}
}

func TestIsDeadLetterName(t *testing.T) {
	sqs := transport.Capabilities{DeadLetterSuffix: "-dlq", FIFOSuffix: ".fifo"}
	for _, tc := range []struct {
		name string
		caps transport.Capabilities
		want bool
	}{
		{"orders.dlq", transport.Capabilities{}, true},
		{"orders", transport.Capabilities{}, false},
		{".dlq", transport.Capabilities{}, false},
		{"orders-dlq", transport.Capabilities{}, false},
		{"orders-dlq", sqs, true},
		{"orders-dlq.fifo", sqs, true},
		{"orders.fifo", sqs, false},
		{"orders.dlq", sqs, false},
	} {
		if got := isDeadLetterName(tc.name, tc.caps); got != tc.want {
			t.Errorf("isDeadLetterName(%q, %+v) = %v, want %v", tc.name, tc.caps, got, tc.want)
		}
	}
}
