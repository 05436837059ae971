package amqp

import (
	"net/url"
	"sync"
	"testing"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestTransport runs the behavioural kit against the real RabbitMQ.
func TestTransport(t *testing.T) {
	var proxies sync.Map // *Transport → *faultproxy.Proxy
	transporttest.Run(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			u, err := url.Parse(brokerURL(t))
			if err != nil {
				t.Fatal(err)
			}
			host := u.Host
			if u.Port() == "" {
				host += ":5672"
			}
			p, err := faultproxy.New(host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			tr := openT(t, WithDialer(p.DialContext))
			proxies.Store(tr, p)
			return tr
		},
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
		// Classic queues only keep the redelivered flag, not a count.
		NativeRedeliveries: false,
		// The connection goes away: the settle writes fail and the consumer's channel
		// dies, so RabbitMQ requeues the delivery; the consumer resumes once it is back.
		BreakSettleWrites: func(_ *testing.T, tr transport.Transport) func() {
			p, _ := proxies.Load(tr)
			p.(*faultproxy.Proxy).Down()
			return p.(*faultproxy.Proxy).Up
		},
		PrefetchBound:         true,
		SettleAfterClose:      true,
		RefusesBadSettlements: true,
	})
}

// TestRuntime runs the runtime's settlement cases end to end through RabbitMQ.
func TestRuntime(t *testing.T) {
	transporttest.RunRuntime(t, transporttest.Config{
		Open:     func(t *testing.T) transport.Transport { return openT(t) },
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		NoKeys:   true,
	})
}
