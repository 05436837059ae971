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
