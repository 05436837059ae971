package driverkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// PublishInOrder reports a refused message and goes on, stops at a failed send (the
// rest not attempted) and hands await what was sent.
func TestPublishInOrder(t *testing.T) {
	noQueue, lost, nacked := errors.New("no queue"), errors.New("link lost"), errors.New("nacked")
	msg := func(q string, n int) *transport.Message { return &transport.Message{Queue: q, Body: make([]byte, n)} }
	msgs := []*transport.Message{msg("a", 1), msg("", 1), msg("a", 99), msg("a", 2), msg("a", 3), msg("b", 1), msg("", 1)}
	var sent []int
	var awaited []int
	err := driverkit.PublishInOrder(context.Background(), msgs,
		func(m *transport.Message) error {
			if m.Queue == "" {
				return noQueue
			}
			return nil
		},
		func(_ context.Context, m *transport.Message) (int, error) {
			switch len(m.Body) {
			case 99:
				return 0, transport.CheckSize("test", m.Queue, 99, 10)
			case 3:
				return 0, lost
			}
			sent = append(sent, len(m.Body))
			return len(m.Body), nil
		},
		func(_ context.Context, got []int, errs []error) {
			for i, n := range got {
				if n != 0 {
					awaited = append(awaited, n)
					if n == 2 {
						errs[i] = nacked
					}
				}
			}
		})
	var be *transport.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("PublishInOrder = %v, want a *transport.BatchError", err)
	}
	want := []error{nil, noQueue, transport.ErrTooLarge, nacked, lost, transport.ErrNotAttempted, transport.ErrNotAttempted}
	for i, w := range want {
		if got := be.Errs[i]; w == nil && got != nil || w != nil && !errors.Is(got, w) {
			t.Errorf("message %d: %v, want %v", i, got, w)
		}
	}
	if len(sent) != 2 || len(awaited) != 2 || awaited[0] != 1 || awaited[1] != 2 {
		t.Errorf("sent %v, awaited %v; want the first and the fourth message", sent, awaited)
	}
	if err := driverkit.PublishInOrder(context.Background(), msgs[:1], func(*transport.Message) error { return nil },
		func(context.Context, *transport.Message) (int, error) { return 1, nil }, func(context.Context, []int, []error) {}); err != nil {
		t.Errorf("a batch all confirmed = %v, want nil", err)
	}
}
