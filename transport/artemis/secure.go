package artemis

import (
	"crypto/tls"
	"errors"
	"strings"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
)

// WithTLSConfig dials an artemis+ssl:// URL with c, in place of the configuration the
// URL's TLS parameters describe (docs/security.md; [transport.TLSOptions] builds the
// same configuration in code). [Open] and [OpenURL] only.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tlsConfig = c } }

// authCause marks Artemis's refusals of the SASL credentials or of a role's permission
// so they match [transport.ErrAuth].
func authCause(err error) error {
	var ce *amqp.ConnError
	var le *amqp.LinkError
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Condition == amqp.ErrCondUnauthorizedAccess:
	case errors.As(err, &ce) && ce.RemoteErr != nil && ce.RemoteErr.Condition == amqp.ErrCondUnauthorizedAccess:
	case errors.As(err, &le) && le.RemoteErr != nil && le.RemoteErr.Condition == amqp.ErrCondUnauthorizedAccess:
	case err != nil && (isSASLRefusal(err) || isSecurityRefusal(err)):
	default:
		return err
	}
	return transport.AuthFailure(err)
}

// isSASLRefusal reports go-amqp's error for a SASL outcome other than ok (it has no
// type of its own).
func isSASLRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SASL PLAIN auth failed") || strings.Contains(msg, "SASL XOAUTH2 auth failed")
}

// isSecurityRefusal reports Artemis's own security errors, which it sends as
// amqp:internal-error: AMQ229031 (the user cannot be validated) and AMQ229032 (the
// user's roles lack a permission on the address).
func isSecurityRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "AMQ229031") || strings.Contains(msg, "AMQ229032")
}
