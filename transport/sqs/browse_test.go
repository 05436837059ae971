package sqs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestBrowseFIFOCannotPeek: a FIFO queue is refused rather than shown in part.
func TestBrowseFIFOCannotPeek(t *testing.T) {
	tr := openTest(t, WithFIFO(true))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := tr.Browse(ctx, transporttest.UniqueName("bqtest"), "", 10)
	var cp *transport.CannotPeekError
	if !errors.Is(err, transport.ErrCannotPeek) || !errors.As(err, &cp) || cp.Reason == "" {
		t.Fatalf("Browse of a FIFO queue: %v", err)
	}
}
