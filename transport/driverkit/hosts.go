package driverkit

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Hosts returns the nodes a URL names: its host part split on commas, each with
// defaultPort added when it has none. Every scheme takes several nodes the same way
// (the first is tried first; a driver that reconnects moves on to the next):
//
//	amqp://user:pass@10.0.0.1:5672,10.0.0.2:5672,10.0.0.3/vhost
//
// net/url wants a port on the last node when several are listed. An empty host part gives "localhost:defaultPort". A node that is empty, or whose
// port is not a number, is an error naming it. IPv6 literals cannot be listed
// (net/url refuses "[::1]:1,[::1]:2"); give such nodes by name. A node without a host
// (":9092") or with a port outside 1-65535 is an error too.
func Hosts(u *url.URL, defaultPort string) ([]string, error) {
	if u.Host == "" {
		return []string{net.JoinHostPort("localhost", defaultPort)}, nil
	}
	parts := strings.Split(u.Host, ",")
	hosts := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("%w: empty node in host list %q", ErrBadHosts, u.Host)
		}
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			// No port: the whole part is the host.
			host, port = strings.Trim(p, "[]"), defaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
			return nil, fmt.Errorf("%w: node %q has no %w (1-65535)", ErrBadHosts, p, ErrBadPort)
		}
		if host == "" {
			return nil, fmt.Errorf("%w: node %q has no host", ErrBadHosts, p)
		}
		hosts = append(hosts, net.JoinHostPort(host, port))
	}
	return hosts, nil
}

// ErrBadHosts is the error [Hosts] wraps when a URL's node list cannot be read.
var ErrBadHosts = errBadHosts{}

// ErrBadPort is the error [Hosts] wraps too when the fault is a node's port (not a
// number in 1-65535), for a driver that names the port as the URL's part at fault.
var ErrBadPort = errors.New("port number")

type errBadHosts struct{}

func (errBadHosts) Error() string { return "driverkit: bad node list" }
