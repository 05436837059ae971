package pulsar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/auth"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// access is how a transport reaches a secure cluster: the TLS configuration of
// pulsar+ssl:// and of an https admin API, and the token (or the file holding it).
type access struct {
	tls              *tls.Config
	token, tokenFile string
}

// WithTLSConfig sets the TLS configuration of a pulsar+ssl:// URL's broker connections,
// in place of the URL's TLS parameters (docs/security.md), and of an https admin API.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.secure.tls = c } }

// WithToken authenticates with a token (a JWT; token= in the URL) with the brokers of a
// URL and with the admin API.
func WithToken(token string) Option {
	return func(o *options) { o.secure.token, o.secure.tokenFile = token, "" }
}

// authentication is the client's token authentication, or nil.
func (a access) authentication() (pc.Authentication, error) {
	switch {
	case a.token != "":
		return pc.NewAuthenticationToken(a.token), nil
	case a.tokenFile != "":
		if _, err := os.Stat(a.tokenFile); err != nil {
			return nil, fmt.Errorf("token_file: %w", err)
		}
		return pc.NewAuthenticationTokenFromFile(a.tokenFile), nil
	}
	return nil, nil
}

// admin builds a client of the admin REST API at url with the transport's TLS
// configuration and token.
func (a access) admin(url string) (admin.Client, error) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	if a.tls != nil {
		base.TLSClientConfig = a.tls.Clone()
	}
	var p auth.Provider
	var err error
	switch {
	case a.token != "":
		p, err = auth.NewAuthenticationToken(a.token, base)
	case a.tokenFile != "":
		p, err = auth.NewAuthenticationTokenFromFile(a.tokenFile, base)
	default:
		p = auth.NewDefaultProvider(base)
	}
	if err != nil {
		return nil, err
	}
	return admin.NewPulsarClientWithAuthProvider(&config.Config{WebServiceURL: url}, p)
}

// accessCheckTopic is the topic whose metadata checkAccess asks for: the lookup needs
// an authenticated, authorised connection, and creates nothing.
const accessCheckTopic = "persistent://public/default/babelqueue-access-check"

// checkAccess makes one request that needs the connection's credentials, so that a
// token the broker refuses fails Open; refused carries the broker's reason ([clientLog]).
func checkAccess(ctx context.Context, client pc.Client, timeout time.Duration, refused <-chan string) error {
	done := make(chan error, 1)
	go func() {
		_, err := client.TopicPartitions(accessCheckTopic)
		done <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return authCause(err)
	case why := <-refused:
		err := fmt.Errorf("the broker refused the connection: %s", why)
		if l := strings.ToLower(why); strings.Contains(l, "authenticat") || strings.Contains(l, "authoriz") {
			return transport.AuthFailure(err)
		}
		return err
	case <-t.C:
		return fmt.Errorf("%w: no answer to a lookup within %s (connect_timeout)", ErrUnreachable, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// authCause marks the broker's refusals of the token or of a permission so they match
// [transport.ErrAuth].
func authCause(err error) error {
	var pe *pc.Error
	if errors.As(err, &pe) && (pe.Result() == pc.AuthenticationError || pe.Result() == pc.AuthorizationError) {
		return transport.AuthFailure(err)
	}
	return err
}

// clientLog is the Pulsar client's log handler: its Info lines lowered to Debug, and
// the broker's reason for refusing a connection's handshake (a token it did not
// accept) reported on refused: the client gives no error for it, only the warning
// "Failed to establish connection with broker: '<the broker's reason>'", and retries.
func clientLog(h slog.Handler, refused chan<- string) slog.Handler {
	return driverkit.ClientLog{Handler: h, Level: driverkit.InfoAsDebug, WatchFrom: slog.LevelWarn, Watch: func(r slog.Record) {
		if why, ok := strings.CutPrefix(r.Message, refusedPrefix); ok && refused != nil {
			select {
			case refused <- strings.Trim(why, "'"):
			default:
			}
		}
	}}
}

const refusedPrefix = "Failed to establish connection with broker: "
