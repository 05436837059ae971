package driverkit

// AckFailed reports whether an Ack of e failed (a settle write the broker refused, an
// acknowledgement that did not reach it): a Rewind of e then gives back a delivery whose
// settlement failed, not one whose handling did. A driver whose broker counts rewinds
// against a redelivery limit (Artemis's max-delivery-attempts) gives such a delivery back
// without counting it, so an outage of the dead-letter queue does not use up the limit.
func (e *Entry[H]) AckFailed() bool {
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	return e.failed
}
