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

// ExtractW3C and WithRemoteParent are compared with the propagator and the API in the
// tests; SpanKeyLearnt reports that the one-allocation parent context is in use.
var (
	ExtractW3C       = extractW3C
	WithRemoteParent = withRemoteParent
	SpanKeyLearnt    = func() bool { return spanKey != nil }
)
