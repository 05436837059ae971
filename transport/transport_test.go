package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
)

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
