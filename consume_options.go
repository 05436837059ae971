package babelqueue

import (
	"slices"

	"github.com/babelqueue-go/babelqueue/transport"
)

// consumeOptions is what the app tells the consumer it opens: the prefetch, and the
// queue and delays its settle writes may use (the dead-letter queue when dead-lettering
// is on, the retry tiers), so that a transport which must prepare them (Kafka topics)
// does so, or fails with a clear error, at start.
func (a *App) consumeOptions() transport.ConsumeOptions {
	o := transport.ConsumeOptions{Prefetch: a.cfg.concurrency}
	if a.cfg.prefetch > o.Prefetch {
		o.Prefetch = a.cfg.prefetch
	}
	if a.pol.DLQOn() {
		o.SettleQueues = []string{a.dlq}
	}
	for _, d := range a.pol.RetryTiers {
		if a.caps.MaxDelay > 0 && d > a.caps.MaxDelay {
			d = a.caps.MaxDelay
		}
		if d > 0 && !slices.Contains(o.SettleDelays, d) {
			o.SettleDelays = append(o.SettleDelays, d)
		}
	}
	return o
}
