package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/babelqueue-go/babelqueue/transport"
)

// WithTLSConfig dials the brokers with c, in place of the URL's TLS parameters
// (docs/security.md); leave c.ServerName empty. [Open] and [OpenURL] only: with [New],
// give the clients kgo.DialTLSConfig yourself.
func WithTLSConfig(c *tls.Config) Option { return func(cfg *config) { cfg.tlsConfig = c } }

// authCause marks Kafka's refusals of the SASL credentials or of an ACL so they match
// [transport.ErrAuth].
func authCause(err error) error {
	if isAuth(err) {
		return transport.AuthFailure(err)
	}
	return err
}

// isAuth reports a refusal of the SASL credentials or of an ACL.
func isAuth(err error) bool {
	for _, e := range []error{kerr.SaslAuthenticationFailed, kerr.IllegalSaslState, kerr.UnsupportedSaslMechanism,
		kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// openGate lowers franz-go's warnings and errors to Debug while opening is set: the
// failures of Open's own check of the broker (a refused certificate, a refused SASL
// login) are what Open returns, in one error.
type openGate struct {
	slog.Handler
	opening *atomic.Bool
}

func (g openGate) Enabled(ctx context.Context, l slog.Level) bool {
	return g.Handler.Enabled(ctx, g.level(l))
}

func (g openGate) Handle(ctx context.Context, r slog.Record) error {
	r.Level = g.level(r.Level)
	return g.Handler.Handle(ctx, r)
}

func (g openGate) level(l slog.Level) slog.Level {
	if g.opening.Load() && l > slog.LevelDebug {
		return slog.LevelDebug
	}
	return l
}

func (g openGate) WithAttrs(as []slog.Attr) slog.Handler {
	return openGate{g.Handler.WithAttrs(as), g.opening}
}

func (g openGate) WithGroup(name string) slog.Handler {
	return openGate{g.Handler.WithGroup(name), g.opening}
}
