package settle_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

func TestDeadLetterQueue(t *testing.T) {
	sqs := transport.Capabilities{DeadLetterSuffix: "-dlq", FIFOSuffix: ".fifo"}
	for _, tc := range []struct {
		queue, override, suffix string
		caps                    transport.Capabilities
		want                    string
	}{
		{"orders", "", "", transport.Capabilities{}, "orders.dlq"},
		{"orders", "graveyard", "", transport.Capabilities{}, "graveyard"},
		{"orders", "", ".dead", transport.Capabilities{}, "orders.dead"},
		{"orders", "", "", sqs, "orders-dlq"},
		{"orders.fifo", "", "", sqs, "orders-dlq.fifo"},
		{"orders.fifo", "", "-x", sqs, "orders-x.fifo"},
		{"orders.fifo", "", "", transport.Capabilities{}, "orders.fifo.dlq"},
		{"orders.fifo", "mine.fifo", "", sqs, "mine.fifo"},
	} {
		if got := settle.DeadLetterQueue(tc.queue, tc.override, tc.suffix, tc.caps); got != tc.want {
			t.Errorf("DeadLetterQueue(%q, %q, %q) = %q, want %q", tc.queue, tc.override, tc.suffix, got, tc.want)
		}
	}
}

func TestReconcileAttempts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rule      transport.AttemptsRule
		body      int
		bodyKnown bool
		d         transport.Delivery
		want      int
	}{
		{"body", transport.AttemptsFromBody, 2, true, transport.Delivery{Redeliveries: 5, AttemptsHeader: 9, HasAttemptsHeader: true}, 2},
		{"poison falls back to header", transport.AttemptsFromBody, 0, false, transport.Delivery{AttemptsHeader: 2, HasAttemptsHeader: true}, 2},
		{"max native", transport.AttemptsMaxNative, 2, true, transport.Delivery{Redeliveries: 4}, 4},
		{"max keeps body", transport.AttemptsMaxNative, 5, true, transport.Delivery{Redeliveries: 1}, 5},
		{"max poison header vs native", transport.AttemptsMaxNative, 0, false, transport.Delivery{Redeliveries: 1, AttemptsHeader: 2, HasAttemptsHeader: true}, 2},
		{"header authoritative lower", transport.AttemptsHeaderAuthoritative, 5, true, transport.Delivery{AttemptsHeader: 1, HasAttemptsHeader: true}, 1},
		{"header absent", transport.AttemptsHeaderAuthoritative, 3, true, transport.Delivery{}, 3},
		{"nothing known", transport.AttemptsHeaderAuthoritative, 0, false, transport.Delivery{}, 0},
		// A negative count is read as written (docs/settlement.md, "A negative attempts").
		{"negative body read as written", transport.AttemptsFromBody, -4, true, transport.Delivery{}, -4},
		{"negative body, header authoritative absent", transport.AttemptsHeaderAuthoritative, -1, true, transport.Delivery{}, -1},
		{"negative header authoritative", transport.AttemptsHeaderAuthoritative, 3, true, transport.Delivery{AttemptsHeader: -1, HasAttemptsHeader: true}, -1},
		{"max native raises a negative body to the native count (first delivery: 0)", transport.AttemptsMaxNative, -1, true, transport.Delivery{}, 0},
		{"max native on a redelivery", transport.AttemptsMaxNative, -1, true, transport.Delivery{Redeliveries: 2}, 2},
		{"no body: a negative header counts 0", transport.AttemptsFromBody, 0, false, transport.Delivery{AttemptsHeader: -3, HasAttemptsHeader: true}, 0},
		{"no body, header authoritative: a negative header counts 0", transport.AttemptsHeaderAuthoritative, 0, false, transport.Delivery{AttemptsHeader: -3, HasAttemptsHeader: true}, 0},
	} {
		if got := settle.ReconcileAttempts(tc.rule, tc.body, tc.bodyKnown, &tc.d); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}
