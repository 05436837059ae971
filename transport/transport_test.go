package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
		if got := transport.DeadLetterQueue(tc.queue, tc.override, tc.suffix, tc.caps); got != tc.want {
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
		{"negative clamps", transport.AttemptsFromBody, -4, true, transport.Delivery{}, 0},
	} {
		if got := transport.ReconcileAttempts(tc.rule, tc.body, tc.bodyKnown, &tc.d); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOpenUnknownSchemeNamesPackages(t *testing.T) {
	_, err := transport.Open(context.Background(), "kafka://127.0.0.1:9092")
	if !errors.Is(err, transport.ErrUnknownScheme) {
		t.Fatalf("err = %v, want ErrUnknownScheme", err)
	}
	if !strings.Contains(err.Error(), "transport/kafka") {
		t.Errorf("error does not name the package to import: %v", err)
	}
}

func TestRedactHidesPasswords(t *testing.T) {
	for _, raw := range []string{
		"amqp://guest:s3cret@127.0.0.1:5672/",
		"redis://:s3cret@127.0.0.1:6379/0",
		"sb://ns.servicebus.windows.net?SharedAccessKey=s3cret",
		"artemis://u:s3cret@[::1",
	} {
		if got := transport.Redact(raw); strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q still shows the secret", raw, got)
		}
	}
	_, err := transport.Open(context.Background(), "amqp://guest:s3cret@[::1")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open error echoes the password: %v", err)
	}
}
