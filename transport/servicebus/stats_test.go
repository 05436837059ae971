package servicebus

import (
	"errors"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestStatsKit counts queues on the fake through the SDK's administration client
// (runtime properties over the ATOM management API) and peek: a locked message stays
// in ActiveMessageCount, so it counts as Ready, and Oldest is the first active
// message's EnqueuedTime.
func TestStatsKit(t *testing.T) {
	b := newFakeBroker()
	adm := b.adminClient(t)
	transporttest.RunStats(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openFake(t, b, WithAdminClient(adm)) },
		Prefetch: 1,
	}, transporttest.StatsOptions{ReadyCountsInFlight: true, Oldest: transporttest.OldestWritten})
}

// TestStatsWithoutAdmin: a transport built around a client, with no administration
// client, says it cannot count rather than guessing.
func TestStatsWithoutAdmin(t *testing.T) {
	tr := openFake(t, newFakeBroker())
	_, err := tr.QueueStats(t.Context(), "orders")
	var ce *transport.CannotCountError
	if !errors.Is(err, transport.ErrCannotCount) || !errors.As(err, &ce) || ce.Reason == "" {
		t.Fatalf("QueueStats without an administration client: %v", err)
	}
}
