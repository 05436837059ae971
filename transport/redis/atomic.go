package redis

// SettlesAtomically reports true: a settlement with writes is one script, which makes
// the writes and removes the reservation together or not at all.
func (c *consumer) SettlesAtomically() bool { return true }
