package driverkit_test

import (
	"errors"
	"net/url"
	"slices"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func TestHosts(t *testing.T) {
	cases := []struct {
		url  string
		want []string
		bad  bool
	}{
		{"amqp://u:p@127.0.0.1:5672/vh", []string{"127.0.0.1:5672"}, false},
		{"amqp://127.0.0.1:5672,127.0.0.1,127.0.0.1:5674/vh", []string{"127.0.0.1:5672", "127.0.0.1:5672", "127.0.0.1:5674"}, false},
		{"redis:///0", []string{"localhost:5672"}, false},
		{"amqp://node-a,node-b:1/", []string{"node-a:5672", "node-b:1"}, false},
		{"amqp://a:1,,b:2/", nil, true},
		{"amqp://a:x1,b:2/", nil, true},
		{"amqp://:5672/", nil, true},
		{"amqp://a:0/", nil, true},
		{"amqp://a:99999/", nil, true},
		{"amqp://a:1,:2/", nil, true},
	}
	badPort := map[string]bool{"amqp://a:x1,b:2/": true, "amqp://a:0/": true, "amqp://a:99999/": true}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			// net/url itself refuses some lists; those never reach Hosts.
			if !c.bad {
				t.Fatalf("parse %s: %v", c.url, err)
			}
			continue
		}
		got, err := driverkit.Hosts(u, "5672")
		if c.bad {
			if !errors.Is(err, driverkit.ErrBadHosts) {
				t.Errorf("Hosts(%s) = %v, %v; want ErrBadHosts", c.url, got, err)
			}
			if errors.Is(err, driverkit.ErrBadPort) != badPort[c.url] {
				t.Errorf("Hosts(%s) = %v; matches ErrBadPort: %v, want %v", c.url, err, !badPort[c.url], badPort[c.url])
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Hosts(%s) = %v, %v; want %v", c.url, got, err, c.want)
		}
	}
}
