package sqs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestBrowseKit runs the browse kit against ElasticMQ. A consumer receives every
// message right after the browse: the walk made them visible again.
func TestBrowseKit(t *testing.T) {
	admin := openTest(t)
	transporttest.RunBrowse(t, transporttest.Config{
		NewQueue:       kitQueues(admin),
		Open:           func(t *testing.T) transport.Transport { return openTest(t) },
		TextBodiesOnly: true,
		ReceiveTimeout: 10 * time.Second,
	}, transporttest.BrowseOptions{Unordered: true})
}

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
