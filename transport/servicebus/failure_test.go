package servicebus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func connLost() error { return &azservicebus.Error{Code: azservicebus.CodeConnectionLost} }

// failTimes returns a hook that fails its first n calls.
func failTimes(n int32) func() error {
	var calls atomic.Int32
	return func() error {
		if calls.Add(1) <= n {
			return connLost()
		}
		return nil
	}
}

// TestReceiveErrorIsReturnedAndRecovered: a receive the SDK gave up on is an error the
// caller sees (with the SDK's code), and the next Receive carries on.
func TestReceiveErrorIsReturnedAndRecovered(t *testing.T) {
	b := newFakeBroker()
	b.failReceive = failTimes(1)
	b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
	tr := openFake(t, b)
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	_, err = c.Receive(context.Background())
	var sbe *azservicebus.Error
	if !errors.As(err, &sbe) || sbe.Code != azservicebus.CodeConnectionLost {
		t.Fatalf("Receive during an outage = %v, want the SDK's CodeConnectionLost", err)
	}
	d := transporttest.Receive(t, c, 5*time.Second)
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// TestRenewalSurvivesTransientFailures: failed renewals are retried before the lock
// runs out, so a short outage does not cost the lock.
func TestRenewalSurvivesTransientFailures(t *testing.T) {
	b := newFakeBroker()
	b.lockDuration = 1500 * time.Millisecond // room for two failed renewals and a retry under -race on a loaded machine
	var renewCalls atomic.Int32
	b.failSettle = func(op string, _ *azservicebus.ReceivedMessage) error {
		if op == "renew" && renewCalls.Add(1) <= 2 {
			return connLost()
		}
		return nil
	}
	b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
	tr := openFake(t, b)
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	d := transporttest.Receive(t, c, 5*time.Second)
	time.Sleep(4 * time.Second) // well past the first lock: only renewals keep it
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatalf("Ack after two failed renewals: %v", err)
	}
	if renewCalls.Load() < 3 {
		t.Errorf("renewal was not retried: %d calls", renewCalls.Load())
	}
}

// TestFailedCompleteIsRedelivered: when CompleteMessage fails the caller is told, the
// delivery stays held for the Rewind the runtime then makes, and Service Bus
// redelivers it.
func TestFailedCompleteIsRedelivered(t *testing.T) {
	b := newFakeBroker()
	b.lockDuration = 200 * time.Millisecond
	fail := failTimes(1)
	b.failSettle = func(op string, _ *azservicebus.ReceivedMessage) error {
		if op == "complete" {
			return fail()
		}
		return nil
	}
	b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
	tr := openFake(t, b)
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	d := transporttest.Receive(t, c, 5*time.Second)
	err = c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack})
	if err == nil || errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("failed complete = %v, want a plain error (no settle write was involved)", err)
	}
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Errorf("Rewind after the failed complete = %v", err)
	}
	d = transporttest.Receive(t, c, 5*time.Second) // the Rewind freed the prefetch slot
	if d.Redeliveries != 1 {
		t.Errorf("redelivered with Redeliveries %d, want 1", d.Redeliveries)
	}
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}
