package redis_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPublishConfirmedKit runs the confirmed-publish kit in both layouts: the default
// one (pipelined RPUSH, headers in the frame) and Laravel's (the push script).
func TestPublishConfirmedKit(t *testing.T) {
	for _, layout := range []struct{ name, query string }{
		{"default", ""},
		{"laravel", "?laravel=1&prefix=bqtest:"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			raw := brokerURL(t)
			// Its own prefix: "*bqtest-*" is cleaned by other suites that may run meanwhile.
			cleanKeys(t, client(t), "*bqconfirm-*")
			transporttest.RunPublishConfirmed(t, transporttest.Config{
				Open: func(t *testing.T) transport.Transport {
					tr, err := transport.Open(ctxT(t), raw+layout.query)
					if err != nil {
						t.Fatal(err)
					}
					return tr
				},
				NewQueue: func(*testing.T) string { return transporttest.UniqueName("bqconfirm") },
				NoKeys:   true,
			})
		})
	}
}
