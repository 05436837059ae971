package amqp

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kitConfig is the behavioural kit's configuration, with settle writes pipelined (the
// default) or awaited (pipeline_settles=0).
func kitConfig(t *testing.T, pipelined bool) transporttest.Config {
	cfg := transporttest.Config{
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
		// Classic queues only keep the redelivered flag, not a count.
		NativeRedeliveries:    false,
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	}
	// Breaking the settle writes takes the connection away: the consumer's channel dies
	// with it, so RabbitMQ requeues the delivery, and the consumer resumes once it is back.
	cfg.OpenThroughProxy(withPipeline(t, brokerURL(t), pipelined), func(t *testing.T, u string) transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := Dial(ctx, u, WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		return tr
	})
	if pipelined {
		// The case wants Settle itself to return the failed write; pipelined, Settle
		// returns once the write is published and the transport rewinds the delivery
		// when the write fails (TestPipelinedWritesConnectionCut,
		// TestPipelinedNackedWriteRewinds).
		cfg.BreakSettleWrites = nil
	}
	return cfg
}

// withPipeline sets pipeline_settles on rawURL.
func withPipeline(t *testing.T, rawURL string, on bool) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pipeline_settles", map[bool]string{true: "1", false: "0"}[on])
	u.RawQuery = q.Encode()
	return u.String()
}

// TestKit runs every group of the behavioural kit against the real RabbitMQ, settle
// writes pipelined (the default) and awaited (pipeline_settles=0: Settle waits for the
// confirms of its writes). Browse is get and requeue, which puts every message back at
// its place; counts come from passive declares.
func TestKit(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "awaited"}[pipelined], func(t *testing.T) {
			h := transporttest.Harness{
				Config: kitConfig(t, pipelined),
				Broker: "amqp",
				OpenWithLimit: func(t *testing.T, limit int) transport.Transport {
					return openT(t, WithMaxMessageSize(limit), WithPipelinedSettles(pipelined))
				},
				OpenPipelined: func(t *testing.T) (direct, pipelined transport.Transport) {
					return openT(t), openT(t, WithPipelinedSettles(true))
				},
				Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
					if c == transporttest.CaseStats {
						cfg.Prefetch = 1 // exact counts
					}
				},
			}
			if pipelined {
				h.Without = map[transporttest.Case]string{
					transporttest.CaseSettleWriteFailure: "the case wants Settle itself to return the failed write; pipelined, " +
						"Settle returns once the write is published and the transport rewinds the delivery when the write " +
						"fails (TestPipelinedWritesConnectionCut, TestPipelinedNackedWriteRewinds); the awaited run has it",
				}
			} else {
				h.Without = map[transporttest.Case]string{
					transporttest.CaseBrowse:           "run once, with the default settings",
					transporttest.CaseStats:            "run once, with the default settings",
					transporttest.CasePipelined:        "run once, with the default settings",
					transporttest.CaseSizeLimit:        "run once, with the default settings",
					transporttest.CasePublishConfirmed: "run once, with the default settings",
				}
			}
			transporttest.RunAll(t, h)
		})
	}
}
