package transport

// AtomicSettler is implemented by a consumer whose Ack settlements make their writes
// and the acknowledgement of the delivery one atomic step on the broker: all of them
// happen or none does, also when the process dies half way (a Redis script; a broker
// transaction on a consumer opened with [ConsumeOptions.Transactional]). A tool that
// moves messages between queues (a redrive) asks [SettlesAtomically] whether a kill
// can leave the message in hand in both queues.
type AtomicSettler interface {
	// SettlesAtomically reports whether every Ack settlement of this consumer makes
	// its writes and its acknowledgement in one atomic step.
	SettlesAtomically() bool
}

// SettlesAtomically reports whether c makes the writes and the acknowledgement of an
// Ack settlement in one atomic step (see [AtomicSettler]). False for a consumer that
// does not say: its writes are confirmed first and the acknowledgement follows, so a
// process killed between the two leaves the message both written and unacknowledged.
func SettlesAtomically(c Consumer) bool {
	a, ok := c.(AtomicSettler)
	return ok && a.SettlesAtomically()
}
