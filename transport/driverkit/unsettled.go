package driverkit

// Unsettled returns the entries handed out and not finished, oldest first: the open
// ones and those being settled, for which keep returns true (all of them when keep is
// nil). A driver that keeps a broker-side lease alive while a delivery is held (an SQS
// visibility timeout, a Service Bus lock) extends these, so a slow settle does not let
// the message go back to the broker under it.
func (l *Ledger[H]) Unsettled(keep func(H) bool) []*Entry[H] {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Entry[H]
	for e := l.head; e != nil; e = e.next {
		if (e.state == open || e.state == settling) && (keep == nil || keep(e.Value)) {
			out = append(out, e)
		}
	}
	return out
}
