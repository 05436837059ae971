package transporttest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
)

// SecureBench is one broker's plain and secure variant, for [BenchSecure].
type SecureBench struct {
	// Plain and Secure open a transport on the plain broker and on its secure variant
	// (TLS, its own users). BenchSecure closes them.
	Plain, Secure func(b *testing.B) transport.Transport
	// NewQueue returns a queue name for the broker's users (a prefix their ACLs allow).
	NewQueue func() string
	// Batch is the number of messages of one turn (default 100).
	Batch int
}

// BenchSecure measures what TLS (and the secure variant's authentication) costs a
// broker, plain and secure timed in turns in the same benchmark, so both see the same
// machine load, after untimed warm-up turns (a JVM broker started recently is not yet
// compiled):
//
//   - ConfirmedPublish: PublishConfirmed of a batch, every message confirmed;
//   - Consume: the consume path end to end, a batch published (confirmed) and every
//     message received and acknowledged by a consumer that stays open. A consume alone
//     cannot be timed fairly: the clients fetch ahead in the background, so a batch
//     already on the queue is often in the client's buffer before the timer starts.
//
// It reports per message the plain (plain-ns/msg) and secure (tls-ns/msg) medians over
// the turns and tls/plain, the median of the per-turn ratios (1 = no cost).
func BenchSecure(b *testing.B, sb SecureBench) {
	if sb.Batch == 0 {
		sb.Batch = 100
	}
	body := func(q string) []byte {
		env, err := envelope.Make("urn:babel:bench:secure", map[string]any{"order_id": 1042, "note": "a typical small body"}, envelope.WithQueue(q))
		if err != nil {
			b.Fatal(err)
		}
		raw, err := env.Encode()
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	type side struct {
		tr transport.Transport
		q  string
		ms []*transport.Message
	}
	open := func(f func(b *testing.B) transport.Transport) *side {
		s := &side{tr: f(b), q: sb.NewQueue()}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.tr.Close(ctx)
		})
		bd := body(s.q)
		for range sb.Batch {
			s.ms = append(s.ms, &transport.Message{Queue: s.q, Body: bd})
		}
		return s
	}
	publish := func(s *side) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return transport.PublishConfirmed(ctx, s.tr, s.ms)
	}

	b.Run("ConfirmedPublish", func(b *testing.B) {
		plain, secure := open(sb.Plain), open(sb.Secure)
		pair(b, sb.Batch, func() error { return publish(plain) }, func() error { return publish(secure) })
	})
	b.Run("Consume", func(b *testing.B) {
		plain, secure := open(sb.Plain), open(sb.Secure)
		consumer := func(s *side) transport.Consumer {
			c, err := s.tr.Consume(context.Background(), s.q, transport.ConsumeOptions{Prefetch: 64})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(context.Background()) })
			return c
		}
		pc, sc := consumer(plain), consumer(secure)
		drain := func(c transport.Consumer) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range sb.Batch {
				d, err := c.Receive(ctx)
				if err != nil {
					return fmt.Errorf("receive: %w", err)
				}
				if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
					return fmt.Errorf("ack: %w", err)
				}
			}
			return nil
		}
		roundTrip := func(s *side, c transport.Consumer) func() error {
			return func() error {
				if err := publish(s); err != nil {
					return err
				}
				return drain(c)
			}
		}
		pair(b, sb.Batch, roundTrip(plain, pc), roundTrip(secure, sc))
	})
}

// pair times plain and secure in turns (benchpair.Turns), after untimed warm-up turns.
func pair(b *testing.B, per int, plain, secure func() error) {
	b.Helper()
	for range max(10, b.N/5) {
		for _, f := range []func() error{plain, secure} {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
	}
	pt, st := benchpair.Turns(b, plain, secure)
	ratios := make([]float64, len(pt))
	for i := range pt {
		ratios[i] = float64(st[i]) / float64(pt[i])
	}
	med := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(per)
	}
	slices.Sort(ratios)
	b.ReportMetric(med(pt), "plain-ns/msg")
	b.ReportMetric(med(st), "tls-ns/msg")
	b.ReportMetric(ratios[len(ratios)/2], "tls/plain")
}
