package kafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
)

// TestBrowseAndStatsWaitOutAMovingCoordinator: a group's coordinator that is not
// available for a moment (a new group's first read on a broker that just started, a
// coordinator moving after a restart) does not fail a browse or a count; both wait it
// out. No real broker can be made to refuse on demand, so franz-go's kfake cluster
// answers FindCoordinator with COORDINATOR_NOT_AVAILABLE for the first three seconds.
func TestBrowseAndStatsWaitOutAMovingCoordinator(t *testing.T) {
	const topic = "bqtest-coordinator"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := kafka.Open(ctx, "kafka://"+c.ListenAddrs()[0]+"?group=bqtest-coordinator")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	if err := transport.PublishConfirmed(ctx, tr, []*transport.Message{
		{Queue: topic, Body: []byte(`{"n":1}`)},
		{Queue: topic, Body: []byte(`{"n":2}`)},
	}); err != nil {
		t.Fatal(err)
	}

	var refuseUntil atomic.Int64 // unix nanoseconds
	refuseUntil.Store(time.Now().Add(3 * time.Second).UnixNano())
	var refused atomic.Int32
	c.ControlKey(kmsg.FindCoordinator.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if time.Now().UnixNano() > refuseUntil.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		req := kreq.(*kmsg.FindCoordinatorRequest)
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.Version = req.Version
		code := kerr.CoordinatorNotAvailable.Code
		if req.Version >= 4 {
			for _, key := range req.CoordinatorKeys {
				co := kmsg.NewFindCoordinatorResponseCoordinator()
				co.Key, co.ErrorCode, co.NodeID = key, code, -1
				resp.Coordinators = append(resp.Coordinators, co)
			}
		} else {
			resp.ErrorCode, resp.NodeID = code, -1
		}
		return resp, nil, true
	})

	page, err := tr.Browse(ctx, topic, "", 10)
	if err != nil {
		t.Fatalf("browse while the coordinator is not available: %v", err)
	}
	if len(page.Deliveries) != 2 {
		t.Fatalf("browse: %d deliveries, want the 2 published", len(page.Deliveries))
	}
	if refused.Load() == 0 {
		t.Fatal("the cluster never refused a FindCoordinator: the test did not test the wait")
	}

	// A second transport in a group of its own: the first one knows its coordinator now.
	tr2, err := kafka.Open(ctx, "kafka://"+c.ListenAddrs()[0]+"?group=bqtest-coordinator-2")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr2.Close(context.Background()) }()
	refuseUntil.Store(time.Now().Add(3 * time.Second).UnixNano())
	before := refused.Load()
	s, err := tr2.QueueStats(ctx, topic)
	if err != nil {
		t.Fatalf("stats while the coordinator is not available: %v", err)
	}
	if s.Ready != 2 {
		t.Fatalf("stats: ready %d, want 2", s.Ready)
	}
	if refused.Load() == before {
		t.Fatal("the cluster never refused the count's FindCoordinator")
	}
}

// whileCoordinatorMoves calls read again, every 200 ms until ctx ends, while it fails
// because the group's coordinator is not available, loading or has moved (a new group
// on a broker that just started, a broker just restarted): the tests' own offset reads
// wait that out as the transport does.
func whileCoordinatorMoves(ctx context.Context, read func() error) error {
	for {
		err := read()
		if !errors.Is(err, kerr.CoordinatorNotAvailable) && !errors.Is(err, kerr.CoordinatorLoadInProgress) &&
			!errors.Is(err, kerr.NotCoordinator) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
