package transporttest

import (
	"sync"
	"testing"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ProxyURL returns rawURL with its host:port (which must be on a loopback address)
// replaced by a loopback TCP proxy to it, and cut, which drops every connection through
// the proxy and refuses new ones until the restore function it returns is called: the
// broker goes away for the clients of the URL only. The proxy closes with the test.
func ProxyURL(t testing.TB, rawURL string) (proxied string, cut func() (restore func())) {
	t.Helper()
	p, proxied := faultproxy.StartURL(t, rawURL)
	return proxied, func() func() {
		p.Down()
		return p.Up
	}
}

// OpenThroughProxy sets c.Open to open each transport with open on a URL of its own
// from [ProxyURL] of rawURL, and c.BreakSettleWrites to cut that transport's proxy: the
// settle writes fail as in a broker outage, and the driver's consumer reconnects when
// the proxy is back.
func (c *Config) OpenThroughProxy(rawURL string, open func(t *testing.T, url string) transport.Transport) {
	var cuts sync.Map // transport.Transport → cut function
	c.Open = func(t *testing.T) transport.Transport {
		u, cut := ProxyURL(t, rawURL)
		tr := open(t, u)
		cuts.Store(tr, cut)
		return tr
	}
	c.BreakSettleWrites = func(t *testing.T, tr transport.Transport) func() {
		cut, ok := cuts.Load(tr)
		if !ok {
			t.Fatal("BreakSettleWrites: the transport was not opened through OpenThroughProxy")
		}
		return cut.(func() func())()
	}
}
