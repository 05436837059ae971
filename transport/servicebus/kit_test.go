package servicebus

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// openFake returns a transport on a fresh fake broker.
func openFake(t *testing.T, b *fakeBroker, opts ...Option) *Transport {
	t.Helper()
	return newTransport(b.client(), newConfig(opts))
}

// TestTransportKit runs the behavioural kit every transport passes, against the fake
// broker behind the SDK seam (no Service Bus namespace or emulator runs here).
func TestTransportKit(t *testing.T) {
	transporttest.Run(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			return openFake(t, newFakeBroker())
		},
		NativeRedeliveries: true,
		ReceiveTimeout:     10 * time.Second,
		QuietPeriod:        300 * time.Millisecond,
		// The namespace refuses every send (settle writes and publishes alike) until
		// restored.
		BreakSettleWrites: func(t *testing.T, tr transport.Transport) func() {
			b := tr.(*Transport).ns.(fakeNamespace).b
			b.mu.Lock()
			b.failSend = func(string, *azservicebus.Message) error {
				return &azservicebus.Error{Code: azservicebus.CodeConnectionLost}
			}
			b.mu.Unlock()
			return func() {
				b.mu.Lock()
				b.failSend = nil
				b.mu.Unlock()
			}
		},
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	})
}

// The other entry points of the kit run on one fake broker per test, shared by the
// transports a case opens (a reader sees what a writer wrote). RunStats is in
// stats_test.go. RunPipelinedClose and RunRuntimeShutdownWithPipelinedWrites are for
// drivers whose Settle returns before their writes are confirmed: Service Bus's settle
// writes are not pipelined (SendMessage returns after the broker's disposition, and
// Settle waits for it).

// TestPublishConfirmedKit: Publish returns once the broker accepted the message
// (Capabilities.PublishConfirmed), so transport.PublishConfirmed publishes one by one.
func TestPublishConfirmedKit(t *testing.T) {
	b := newFakeBroker()
	transporttest.RunPublishConfirmed(t, transporttest.Config{
		Open:           func(t *testing.T) transport.Transport { return openFake(t, b) },
		ReceiveTimeout: 10 * time.Second,
		QuietPeriod:    300 * time.Millisecond,
	})
}

// TestBrowseKit pages through queues with the fake's peek (the SDK's PeekMessages from
// a sequence number). Each queue is declared first, as Service Bus queues are made
// beforehand: the kit's "queue nobody wrote to" is an empty queue that exists (peeking
// one that does not exist is CodeNotFound, on Service Bus as on the fake).
func TestBrowseKit(t *testing.T) {
	b := newFakeBroker()
	transporttest.RunBrowse(t, transporttest.Config{
		NewQueue: func(*testing.T) string {
			q := transporttest.UniqueName("bqtest")
			b.declare(q)
			return q
		},
		Open:           func(t *testing.T) transport.Transport { return openFake(t, b) },
		ReceiveTimeout: 10 * time.Second,
		QuietPeriod:    300 * time.Millisecond,
	}, transporttest.BrowseOptions{})
}

// TestSizeLimitKit checks the size check with a limit set low in code (the URL's
// max_message_size starts at 1024).
func TestSizeLimitKit(t *testing.T) {
	b := newFakeBroker()
	transporttest.RunSizeLimit(t, transporttest.Config{ReceiveTimeout: 10 * time.Second, QuietPeriod: 300 * time.Millisecond}, "servicebus",
		func(t *testing.T, limit int) transport.Transport { return openFake(t, b, WithMaxMessageSize(limit)) })
}

// TestRuntimeKit runs the runtime's settlement cases end to end through the transport
// and the fake broker.
func TestRuntimeKit(t *testing.T) {
	transporttest.RunRuntime(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			return openFake(t, newFakeBroker())
		},
		NativeRedeliveries: true,
		ReceiveTimeout:     10 * time.Second,
		QuietPeriod:        300 * time.Millisecond,
	})
}
