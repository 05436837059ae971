package pulsar

import "github.com/babelqueue-go/babelqueue/transport"

// FailSettleWrites makes the settle writes of tr fail with what fail returns (nil lets a
// write through) until restore is called. Publishes are not affected.
func FailSettleWrites(tr *Transport, fail func(*transport.Message) error) (restore func()) {
	tr.faultHook.Store(&fail)
	return func() { tr.faultHook.Store(nil) }
}

// WireSize is what the size check counts of m.
func WireSize(m *transport.Message) int { return wireSize(producerMessage(m)) }
