package babelqueue

import (
	"context"
	"slices"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// consumeOptions is what the app tells the consumer it opens: the prefetch, the queue
// and delays its settle writes may use (the dead-letter queue when dead-lettering is on,
// the retry tiers), so that a transport which must prepare them (Kafka topics) does so,
// or fails with a clear error, at start, and, when an observer wants to know, where to
// report a pipelined settlement whose writes failed afterwards.
func (a *App) consumeOptions() transport.ConsumeOptions {
	o := transport.ConsumeOptions{Prefetch: a.cfg.concurrency}
	if a.cfg.prefetch > o.Prefetch {
		o.Prefetch = a.cfg.prefetch
	}
	if a.pol.DLQOn() {
		o.SettleQueues = []string{a.dlq}
	}
	if len(a.hooks.settleFailed) > 0 {
		o.SettleFailed = a.settleFailed
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

// settleFailed is the consumer's ConsumeOptions.SettleFailed: it reads the delivery
// again (a failure is rare, so nothing is kept per settlement for it) and tells the
// SettleFailedHook observers.
func (a *App) settleFailed(d *transport.Delivery, s transport.Settlement, err error) {
	x := a.classify(d)
	if x.env != nil {
		if _, ok := a.handler(x.env.Job); !ok {
			x.facts.Kind = settle.UnknownURN
		}
	}
	ev := SettleFailedEvent{Delivery: x.info(), Kind: Kind(x.facts.Kind.String()), Err: err}
	for _, w := range s.Writes {
		ev.Writes = append(ev.Writes, Write{Queue: w.Queue, Delay: w.Delay})
	}
	ctx := context.Background()
	for _, h := range a.hooks.settleFailed {
		h.OnSettleFailed(ctx, ev)
	}
}
