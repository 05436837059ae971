package babelqueue

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// UnknownURNStrategy says what happens to a valid envelope whose URN has no handler
// (on_unknown_urn; docs/settlement.md).
type UnknownURNStrategy int

const (
	// UnknownFail treats it as a failing handler: retried up to max_attempts, then
	// dead-lettered with reason unknown_urn (or dropped with dead-lettering off).
	UnknownFail UnknownURNStrategy = iota
	// UnknownDelete acknowledges and drops it. It also drops poison bodies and
	// schema-version rejections, even with dead-lettering on.
	UnknownDelete
	// UnknownRelease re-publishes it unchanged for another consumer.
	UnknownRelease
	// UnknownDeadLetter dead-letters it at once with reason unknown_urn; it also turns
	// dead-lettering on for every other case.
	UnknownDeadLetter
)

// String returns the strategy's name as the other SDKs spell it.
func (s UnknownURNStrategy) String() string {
	switch s {
	case UnknownFail:
		return "fail"
	case UnknownDelete:
		return "delete"
	case UnknownRelease:
		return "release"
	case UnknownDeadLetter:
		return "dead_letter"
	default:
		return fmt.Sprintf("UnknownURNStrategy(%d)", int(s))
	}
}

// ParseUnknownURNStrategy reads "fail", "delete", "release" or "dead_letter".
func ParseUnknownURNStrategy(s string) (UnknownURNStrategy, error) {
	for _, v := range []UnknownURNStrategy{UnknownFail, UnknownDelete, UnknownRelease, UnknownDeadLetter} {
		if strings.EqualFold(s, v.String()) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: on_unknown_urn %q (want fail, delete, release or dead_letter)", ErrInvalidOption, s)
}

// ErrInvalidOption matches every error about an option value, the runtime's and the
// drivers' (a driver's option given in code or in its URL). It is
// [transport.ErrInvalidOption].
var ErrInvalidOption = transport.ErrInvalidOption

// Option configures an [App].
type Option func(*config)

type config struct {
	queue            string
	maxAttempts      int
	deadLetter       bool
	deadLetterQueue  string
	deadLetterSuffix string
	onUnknownURN     UnknownURNStrategy
	retryTiers       []time.Duration
	concurrency      int
	prefetch         int // 0: the concurrency (WithPrefetch)
	handlerTimeout   time.Duration
	shutdownGrace    time.Duration
	settleTimeout    time.Duration
	logger           *slog.Logger
	observers        []Observer
	unmarshal        func([]byte, any) error // nil: encoding/json
	now              func() time.Time
	errs             []error
}

func defaultConfig() config {
	return config{
		queue:         "default",
		maxAttempts:   3,
		onUnknownURN:  UnknownFail,
		concurrency:   1,
		shutdownGrace: 30 * time.Second,
		settleTimeout: 60 * time.Second,
		now:           time.Now,
	}
}

func (c *config) invalid(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

// WithQueue sets the queue the app consumes and publishes to by default (default
// "default").
func WithQueue(name string) Option {
	return func(c *config) {
		if strings.TrimSpace(name) == "" {
			c.invalid("queue name is empty")
			return
		}
		c.queue = name
	}
}

// WithMaxAttempts sets how many times a delivery is tried before it is dead-lettered
// or dropped (default 3; at least 1).
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("max_attempts %d (want at least 1)", n)
			return
		}
		c.maxAttempts = n
	}
}

// WithDeadLetter turns dead-lettering on or off (default off).
func WithDeadLetter(on bool) Option { return func(c *config) { c.deadLetter = on } }

// WithDeadLetterQueue names the dead-letter queue, replacing "<queue>.dlq".
func WithDeadLetterQueue(name string) Option {
	return func(c *config) {
		if strings.TrimSpace(name) == "" {
			c.invalid("dead_letter_queue is empty")
			return
		}
		c.deadLetterQueue = name
	}
}

// WithDeadLetterSuffix replaces the dead-letter suffix (".dlq", or "-dlq" on SQS).
func WithDeadLetterSuffix(suffix string) Option {
	return func(c *config) {
		if suffix == "" {
			c.invalid("dead_letter_suffix is empty")
			return
		}
		c.deadLetterSuffix = suffix
	}
}

// WithUnknownURN sets the on_unknown_urn strategy (default [UnknownFail]).
func WithUnknownURN(s UnknownURNStrategy) Option {
	return func(c *config) {
		if s < UnknownFail || s > UnknownDeadLetter {
			c.invalid("on_unknown_urn %d", int(s))
			return
		}
		c.onUnknownURN = s
	}
}

// WithRetryTiers sets the delays of successive retries (retry_tiers_ms): the first
// retry waits tiers[0], the second tiers[1], and every later one the last tier.
func WithRetryTiers(tiers ...time.Duration) Option {
	return func(c *config) {
		for _, d := range tiers {
			if d < 0 {
				c.invalid("retry tier %s is negative", d)
				return
			}
		}
		c.retryTiers = append([]time.Duration(nil), tiers...)
	}
}

// WithConcurrency sets how many handlers run at once (default 1). It is also the
// prefetch asked of the broker, unless [WithPrefetch] sets another.
func WithConcurrency(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("concurrency %d (want at least 1)", n)
			return
		}
		c.concurrency = n
	}
}

// WithPrefetch sets how many deliveries the consumer may hold at once: the broker's
// prefetch (RabbitMQ's basic.qos, Artemis's link credit, the messages Redis reserves in
// one call; on Pulsar the deliveries handed out, its client's receiver queue being the
// transport's receiver_queue). The default is the concurrency, so that no
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

// WithHandlerTimeout bounds one handler call; a handler that runs longer has failed.
// Zero (the default) means no bound.
func WithHandlerTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("handler timeout %s is negative", d)
			return
		}
		c.handlerTimeout = d
	}
}

// WithShutdownGrace sets how long Run lets in-flight handlers finish once its context
// ends (default 30s). Deliveries still running after it are given back to the broker.
func WithShutdownGrace(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("shutdown grace %s is negative", d)
			return
		}
		c.shutdownGrace = d
	}
}

// WithSettleTimeout bounds one settlement call to the broker, writes included
// (default 60s). A worker reuses one deadline for several settlements, so each gets at
// least half of d and at most d.
func WithSettleTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("settle timeout %s (want more than zero)", d)
			return
		}
		c.settleTimeout = d
	}
}

// WithUnmarshal sets the function that decodes a message's data for [Message.Bind] and
// the typed handlers of [Handle] (default: encoding/json's Unmarshal). It must keep
// encoding/json's contract (the same struct tags and null handling): a drop-in decoder
// such as github.com/goccy/go-json's Unmarshal binds large bodies several times faster
// (BENCHMARKS.md). The data it is given is never changed while the message is in use,
// so a decoder may keep references into it. Only binding changes: the envelope itself
// is always read by the runtime's own strict decoder.
func WithUnmarshal(unmarshal func(data []byte, v any) error) Option {
	return func(c *config) {
		if unmarshal == nil {
			c.invalid("unmarshal function is nil")
			return
		}
		c.unmarshal = unmarshal
	}
}

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.invalid("logger is nil")
			return
		}
		c.logger = l
	}
}
