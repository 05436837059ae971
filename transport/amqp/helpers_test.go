package amqp

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// brokerURL is the RabbitMQ the integration tests run against.
func brokerURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_AMQP_URL", "rabbitmq")
}

// openT opens a transport on the test broker, closed when the test ends.
func openT(t testing.TB, opts ...Option) *Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, brokerURL(t), append([]Option{WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// rawConn is a plain amqp091 connection for looking at what the transport wrote.
func rawConn(t testing.TB) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.Dial(brokerURL(t))
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func rawChannel(t testing.TB, conn *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("raw channel: %v", err)
	}
	return ch
}

// newQueue returns a fresh queue name and deletes the queue (and the delay queues the
// test made for it) when the test ends, so the shared broker does not fill up.
func newQueue(t testing.TB) string {
	t.Helper()
	q := transporttest.UniqueName("bqtest-amqp")
	url := brokerURL(t)
	t.Cleanup(func() { deleteQueues(url, q) })
	return q
}

// deleteQueues deletes q, q.dlq and q's delay queues that the test made.
func deleteQueues(url, q string) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	names := []string{q, q + ".dlq"}
	for _, ms := range []int{1, 100, 200, 300, 500, 1000, 2000, 3000} {
		names = append(names, q+".delay."+itoa(ms))
	}
	for _, n := range names {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(n, false, false, false)
		_ = ch.Close()
	}
}

func itoa(n int) string {
	const digits = "0123456789"
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{digits[n%10]}, b...)
		n /= 10
	}
	return string(b)
}

// killer is a dialer that remembers its connections so a test can cut them, which is
// what a broker restart looks like from the client: the socket dies.
type killer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (k *killer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.conns = append(k.conns, c)
	k.mu.Unlock()
	return c, nil
}

// killAll closes every socket dialled so far.
func (k *killer) killAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

func receive(t testing.TB, c transport.Consumer, timeout time.Duration) *transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return d
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testLogger sends the transport's logs to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
