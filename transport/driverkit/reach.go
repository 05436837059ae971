package driverkit

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Reach dials the nodes (host:port) in turn until one accepts a TCP connection and,
// with tlsConfig, completes a TLS handshake; it returns nil then. A node that refuses
// the handshake on a certificate answered: Reach returns that error at once. Otherwise
// it returns every node's error joined. A driver's Open calls it, bounded by its
// connect timeout, so that a broker that is not there fails Open with one error rather
// than the client's retries.
func Reach(ctx context.Context, nodes []string, tlsConfig *tls.Config) error {
	var errs []error
	for _, hp := range nodes {
		var conn net.Conn
		var err error
		if tlsConfig == nil {
			conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", hp)
		} else {
			conn, err = (&tls.Dialer{Config: tlsConfig}).DialContext(ctx, "tcp", hp)
		}
		if err == nil {
			_ = conn.Close()
			return nil
		}
		if transport.IsTLSError(err) {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
