package kafka

import (
	"crypto/tls"
	"errors"

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
