package memory

// SettlesAtomically reports true: a settlement's writes and its acknowledgement happen
// together, under the broker's lock, or not at all.
func (c *consumer) SettlesAtomically() bool { return true }
