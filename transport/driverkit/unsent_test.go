package driverkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func TestUnsent(t *testing.T) {
	if driverkit.Unsent(nil) != nil {
		t.Error("Unsent(nil) is not nil")
	}
	if driverkit.IsUnsent(nil) || driverkit.IsUnsent(context.Canceled) {
		t.Error("IsUnsent of nil or of an unmarked error")
	}
	cause := errors.New("dial refused")
	err := driverkit.Unsent(cause)
	if !driverkit.IsUnsent(err) || !errors.Is(err, cause) || err.Error() != cause.Error() {
		t.Errorf("Unsent(%v) = %v: want it marked, wrapping the cause, with its text", cause, err)
	}
	if wrapped := fmt.Errorf("publish: %w", err); !driverkit.IsUnsent(wrapped) {
		t.Errorf("IsUnsent(%v) = false through a wrap", wrapped)
	}
}
