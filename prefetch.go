package babelqueue

// WithPrefetch sets how many deliveries the consumer may hold at once: the broker's
// prefetch (RabbitMQ's basic.qos, Artemis's link credit, Pulsar's receiver queue, the
// messages Redis reserves in one call). The default is the concurrency, so that no
// message waits unhandled in this process. A larger prefetch hides the round trip to
// the broker behind the handlers (a delivery is waiting when a worker finishes), at
// the price of deliveries held here: they are given back when the app stops, and on a
// broker with a visibility deadline (SQS, Redis's retry_after) a held delivery's clock
// runs while it waits. A prefetch below the concurrency is raised to it.
func WithPrefetch(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("prefetch %d (want at least 1)", n)
			return
		}
		c.prefetch = n
	}
}
