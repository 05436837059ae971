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

// TestKit runs every group of the behavioural kit against the fake broker behind the
// SDK seam (no Service Bus namespace or emulator runs here). The transports of a test
// share one fake broker (a reader sees what a writer wrote); each queue is declared
// first, as Service Bus queues are made beforehand: the kit's "queue nobody wrote to" is
// an empty queue that exists (peeking one that does not exist is CodeNotFound, on Service
// Bus as on the fake). Counts go through the SDK's administration client (runtime
// properties over the ATOM management API) and peek: a locked message stays in
// ActiveMessageCount, so it counts as Ready, and Oldest is the first active message's
// EnqueuedTime.
func TestKit(t *testing.T) {
	b := newFakeBroker()
	adm := b.adminClient(t)
	transporttest.RunAll(t, transporttest.Harness{
		Config: transporttest.Config{
			Open: func(t *testing.T) transport.Transport { return openFake(t, b, WithAdminClient(adm)) },
			NewQueue: func(*testing.T) string {
				q := transporttest.UniqueName("bqtest")
				b.declare(q)
				return q
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
		},
		Broker: "servicebus",
		Stats:  transporttest.StatsOptions{ReadyCountsInFlight: true, Oldest: transporttest.OldestWritten},
		// The size check with a limit set low in code (the URL's max_message_size
		// starts at 1024).
		OpenWithLimit: func(t *testing.T, limit int) transport.Transport { return openFake(t, b, WithMaxMessageSize(limit)) },
		Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
			if c == transporttest.CaseStats {
				cfg.Prefetch = 1 // exact in-flight counts
				// A queue nobody wrote to must not exist here: not declared first.
				cfg.NewQueue = func(*testing.T) string { return transporttest.UniqueName("bqtest") }
			}
		},
		Without: map[transporttest.Case]string{
			transporttest.CasePipelined: "Service Bus's settle writes are not pipelined: SendMessage returns after the broker's disposition, and Settle waits for it",
		},
	})
}
