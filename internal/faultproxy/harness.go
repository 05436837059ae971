package faultproxy

import (
	"net/url"
	"testing"
)

// Start starts a proxy to target (host:port on a loopback address) for the test t and
// closes it when t ends; a proxy that cannot start fails t. A test that freezes the
// proxy registers t.Cleanup(p.Thaw) after opening its clients, so that their own
// cleanups, which run first, do not wait on a frozen connection when it fails early.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// StartURL starts a proxy, as [Start], to the host of rawURL (a broker or database URL
// whose host:port is on a loopback address) and returns it with rawURL pointing at it:
// a client of the returned URL reaches the target through the proxy only.
func StartURL(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the URL, which may hold a password: not shown.
		t.Fatal("faultproxy: the URL does not parse")
	}
	if u.Port() == "" {
		t.Fatalf("faultproxy: the URL's host %q names no port", u.Hostname())
	}
	p := Start(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}
