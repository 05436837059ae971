package redis_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestBrowseKit runs the browse kit in both layouts: frames unwrapped with their
// headers (default), headers from the header hash (Laravel).
func TestBrowseKit(t *testing.T) {
	for _, layout := range []struct{ name, query string }{
		{"default", ""},
		{"laravel", "?laravel=1&prefix=bqtest:"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			raw := brokerURL(t)
			cleanKeys(t, client(t), "*bqtest-*")
			transporttest.RunBrowse(t, transporttest.Config{
				Open: func(t *testing.T) transport.Transport {
					tr, err := transport.Open(ctxT(t), raw+layout.query)
					if err != nil {
						t.Fatal(err)
					}
					return tr
				},
				NoKeys: true,
			}, transporttest.BrowseOptions{})
		})
	}
}
