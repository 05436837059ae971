package worker

import (
	"context"
	"slices"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// consumeOptions is what the pool tells the consumer it opens: the prefetch, the queue
// and delays its settle writes may use (the dead-letter queue when dead-lettering is on,
// the retry tiers), so that a transport which must prepare them (Kafka topics) does so,
// or fails with a clear error, at start, and, when an observer wants to know, where to
// report a pipelined settlement whose writes failed afterwards.
func (p *Pool[M]) consumeOptions() transport.ConsumeOptions {
	cfg := &p.cfg
	o := transport.ConsumeOptions{Prefetch: max(cfg.Concurrency, cfg.Prefetch)}
	if cfg.Policy.DLQOn() {
		o.SettleQueues = []string{cfg.DeadLetterQueue}
	}
	if p.obs.SettleFailed {
		o.SettleFailed = p.settleFailed
	}
	for _, d := range cfg.Policy.RetryTiers {
		if cfg.Caps.MaxDelay > 0 && d > cfg.Caps.MaxDelay {
			d = cfg.Caps.MaxDelay
		}
		if d > 0 && !slices.Contains(o.SettleDelays, d) {
			o.SettleDelays = append(o.SettleDelays, d)
		}
	}
	return o
}

// settleFailed is the consumer's ConsumeOptions.SettleFailed: it reads the delivery
// again (a failure is rare, so nothing is kept per settlement for it) and tells the
// hooks.
func (p *Pool[M]) settleFailed(d *transport.Delivery, s transport.Settlement, err error) {
	x := p.classify(d)
	if x.Env != nil {
		if _, ok := p.app.Handler(x.Env.Job); !ok {
			x.Facts.Kind = settle.UnknownURN
		}
	}
	p.hooks.SettleFailed(context.Background(), x.Delivery, s.Writes, err)
}
