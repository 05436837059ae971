package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestRebalanceSettlesEveryRecordOnce runs one consumer on a four-partition topic, starts a
// second member of the same group half-way (a rebalance moves partitions to it), and
// checks that every record is settled successfully exactly once, that a settle refused
// because of the rebalance says so with ErrRevoked, and that everything was committed.
func TestRebalanceSettlesEveryRecordOnce(t *testing.T) {
	t.Parallel()
	group := transporttest.UniqueName("bqtest-rebalance")
	q := newTopic(t, "bqtest-rebalance")
	createTopic(t, q, 4)
	trA := openKafka(t, "group", group)
	trB := openKafka(t, "group", group)
	const n = 400
	for i := range n {
		publishOK(t, trA, &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i), Key: fmt.Appendf(nil, "key-%d", i)})
	}

	var (
		mu        sync.Mutex
		settled   = map[string]int{}
		byMember  = map[string]int{}
		revoked   int
		allDone   = make(chan struct{})
		closeOnce sync.Once
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	work := func(member string, c transport.Consumer) {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					d, err := c.Receive(ctx)
					if err != nil {
						return
					}
					// A handler doing some work: slow enough that A still has several
					// seconds of records left when B joins (a rebalance waits for A's next
					// heartbeat, 3 s by default), so partitions really move.
					time.Sleep(75 * time.Millisecond)
					err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
					mu.Lock()
					switch {
					case err == nil:
						settled[string(d.Body)]++
						byMember[member]++
						if len(settled) == n {
							closeOnce.Do(func() { close(allDone) })
						}
					case errors.Is(err, kafka.ErrRevoked) && errors.Is(err, transport.ErrAlreadySettled):
						revoked++
					default:
						t.Errorf("%s: Settle: %v", member, err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	cA := consumeOn(t, trA, q, 4)
	work("A", cA)
	// Let A make progress, then add B.
	for {
		mu.Lock()
		k := len(settled)
		mu.Unlock()
		if k >= n/4 || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cB := consumeOn(t, trB, q, 4)
	work("B", cB)
	select {
	case <-allDone:
	case <-ctx.Done():
	}
	// Quiet: nothing may come back after everything was settled.
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != n {
		t.Fatalf("settled %d distinct records, want %d", len(settled), n)
	}
	for b, k := range settled {
		if k != 1 {
			t.Errorf("record %s settled %d times", b, k)
		}
	}
	if byMember["B"] == 0 {
		t.Errorf("the second member settled nothing: no partition moved (A %d, B %d)", byMember["A"], byMember["B"])
	}
	t.Logf("settled by A %d, by B %d; settles refused after revoke %d", byMember["A"], byMember["B"], revoked)

	// Everything is committed: a fresh member of the group receives nothing.
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer closeCancel()
	_ = cA.Close(closeCtx)
	_ = cB.Close(closeCtx)
	trC := openKafka(t, "group", group)
	cC := consumeOn(t, trC, q, 4)
	transporttest.ExpectNothing(t, cC, 6*time.Second)
}
