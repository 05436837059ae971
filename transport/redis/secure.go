package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// authCause marks Redis's refusals of the connection's credentials or ACL permissions
// (WRONGPASS, NOAUTH, NOPERM) so the open error matches [transport.ErrAuth].
func authCause(err error) error {
	msg := err.Error()
	for _, code := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, code) {
			return transport.AuthFailure(err)
		}
	}
	return err
}

// checkTLS makes one TLS handshake with the server of o ([driverkit.Reach]), so a
// certificate the client refuses fails Open with its cause at once: go-redis would retry
// the dial five times and log each failure on its process-wide logger before Ping
// returned the same error. A client of several nodes (nil: Sentinel, Redis Cluster) is
// left to Ping.
func checkTLS(ctx context.Context, o *goredis.Options) error {
	if o == nil || o.TLSConfig == nil || o.Network == "unix" {
		return nil
	}
	if o.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.DialTimeout)
		defer cancel()
	}
	return driverkit.Reach(ctx, []string{o.Addr}, o.TLSConfig)
}
