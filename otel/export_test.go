package otel

// Pending counts the CONSUMER spans kept for settlements not yet told: zero once every
// delivery is settled.
func (t *Tracing) Pending() int {
	n := 0
	t.spans.Range(func(any, any) bool { n++; return true })
	return n
}

// InjectW3C is injectW3C, compared with the propagator in the tests.
var InjectW3C = injectW3C
