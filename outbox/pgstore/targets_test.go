package pgstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/amqp"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	_ "github.com/babelqueue-go/babelqueue/transport/redis" // redis:// URLs
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// target is a real broker the relay publishes to.
type target struct {
	name string
	env  string // the variable holding its URL
	keys bool   // the broker carries record keys
}

var targets = []target{
	{name: "redis", env: "BQ_REDIS_URL"},
	{name: "rabbitmq", env: "BQ_AMQP_URL"},
	{name: "kafka", env: "BQ_KAFKA_URL", keys: true},
}

// forEach runs fn as a subtest per broker, the brokers side by side.
func forEach(t *testing.T, fn func(t *testing.T, tg target)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			fn(t, tg)
		})
	}
}

// rereads reports whether collect reads the queue from its start every time (it does
// not take the messages away).
func (tg target) rereads() bool { return tg.name != "rabbitmq" }

// url is the broker's URL; the test fails under CI=true when the broker is not there.
func (tg target) url(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, tg.env, tg.name)
}

// host is the broker's host:port.
func (tg target) host(t testing.TB) string {
	u, err := url.Parse(tg.url(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// newQueue returns a queue of the test's own, deleted when it ends (a Kafka topic is
// created with three partitions, so keys spread over them).
func (tg target) newQueue(t testing.TB) string {
	t.Helper()
	q := transporttest.UniqueName("outboxtest")
	raw := tg.url(t)
	switch tg.name {
	case "redis":
		t.Cleanup(func() {
			opts, err := goredis.ParseURL(raw)
			if err != nil {
				return
			}
			c := goredis.NewClient(opts)
			defer c.Close()
			c.Del(context.Background(), q, q+":processing", q+":processing:deadlines", q+":delayed")
		})
	case "rabbitmq":
		t.Cleanup(func() {
			conn, err := amqp091.Dial(raw)
			if err != nil {
				return
			}
			defer conn.Close()
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
		})
	case "kafka":
		adm := kadm.NewClient(tg.kafkaClient(t))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := adm.CreateTopic(ctx, 3, 1, nil, q)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", q, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = adm.DeleteTopics(ctx, q)
		})
	}
	return q
}

// kafkaClient is a plain franz-go client on the test broker, closed with the test.
func (tg target) kafkaClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(tg.host(t), ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// proxy puts a fault proxy in front of the broker.
func (tg target) proxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	return faultproxy.Start(t, tg.host(t))
}

// open returns a transport on the broker (through p when it is not nil), closed when
// the test ends. Timeouts are short so a broker outage shows within the test.
func (tg target) open(t testing.TB, p *faultproxy.Proxy) transport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := tg.url(t)
	var tr transport.Transport
	var err error
	switch tg.name {
	case "kafka":
		opts := []kafka.Option{kafka.WithDeliveryTimeout(3 * time.Second), kafka.WithLogger(testLogger(t))}
		if p == nil {
			tr, err = kafka.Open(ctx, raw, opts...)
			break
		}
		base := []kgo.Opt{kgo.SeedBrokers(strings.Split(tg.host(t), ",")...), kgo.Dialer(p.DialContext)}
		var prod *kgo.Client
		prod, err = kgo.NewClient(append(base, kgo.AllowAutoTopicCreation(), kgo.MetadataMinAge(250*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(prod.Close)
		tr, err = kafka.New(prod, kafka.Factory(base...), opts...)
	case "rabbitmq":
		u, _ := url.Parse(raw)
		if p != nil {
			u.Host = p.Addr()
		}
		tr, err = amqp.Dial(ctx, u.String(), amqp.WithLogger(testLogger(t)), amqp.WithConfirmTimeout(3*time.Second))
	default:
		u, _ := url.Parse(raw)
		if p != nil {
			u.Host = p.Addr()
			q := u.Query()
			q.Set("dial_timeout", "1s")
			q.Set("read_timeout", "3s")
			q.Set("write_timeout", "3s")
			u.RawQuery = q.Encode()
		}
		tr, err = transport.Open(ctx, u.String())
	}
	if err != nil {
		t.Fatalf("open %s: %v", tg.name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// got is a message read back from the broker.
type got struct {
	ID      string // meta.id
	Data    string // the envelope's data
	Body    []byte
	Key     []byte
	Headers map[string]string
}

// collect reads queue from the broker until it has seen want distinct meta.ids and then
// nothing more for quiet, and returns every message in the order read (duplicates
// included). It fails the test when the ids do not all arrive within timeout. On Redis
// and Kafka it reads without taking (from the start every time); on RabbitMQ it
// consumes.
func (tg target) collect(t testing.TB, queue string, want int, quiet, timeout time.Duration) []got {
	t.Helper()
	var out []got
	seen := map[string]bool{}
	add := func(body, key []byte, headers map[string]string) {
		env, err := envelope.Decode(body)
		if err != nil {
			t.Fatalf("a message on %s is not an envelope: %v (%q)", queue, err, body)
		}
		seen[env.Meta.ID] = true
		out = append(out, got{ID: env.Meta.ID, Data: string(env.Data), Body: body, Key: key, Headers: headers})
	}
	deadline := time.Now().Add(timeout)
	wait := func() (time.Duration, bool) {
		if len(seen) >= want {
			return quiet, true
		}
		return time.Until(deadline), false
	}
	if tg.name == "kafka" {
		cl := tg.kafkaClient(t, kgo.ConsumeTopics(queue), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		for {
			d, _ := wait()
			if d <= 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			fs := cl.PollFetches(ctx)
			expired := ctx.Err() != nil
			cancel()
			n := 0
			fs.EachRecord(func(r *kgo.Record) {
				n++
				h := map[string]string{}
				for _, rh := range r.Headers {
					if !strings.HasPrefix(rh.Key, "bq-") {
						h[rh.Key] = string(rh.Value)
					}
				}
				add(r.Value, r.Key, h)
			})
			if n == 0 && expired {
				break
			}
		}
	} else if tg.name == "redis" {
		// The list as Redis holds it, read without taking anything: each element is
		// the envelope, or the frame {"__bq_frame":1,"headers":{…},"body":"…"} when it
		// has headers.
		opts, err := goredis.ParseURL(tg.url(t))
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		read := 0
		for {
			d, _ := wait()
			if d <= 0 {
				break
			}
			els, err := c.LRange(context.Background(), queue, int64(read), -1).Result()
			if err != nil {
				t.Fatalf("LRANGE %s: %v", queue, err)
			}
			for _, el := range els {
				var f struct {
					Frame   int               `json:"__bq_frame"`
					Headers map[string]string `json:"headers"`
					Body    string            `json:"body"`
				}
				if json.Unmarshal([]byte(el), &f) == nil && f.Frame == 1 {
					add([]byte(f.Body), nil, f.Headers)
				} else {
					add([]byte(el), nil, nil)
				}
			}
			read += len(els)
			if len(els) == 0 {
				if done := len(seen) >= want; done || time.Now().After(deadline) {
					if done {
						time.Sleep(quiet) // then one last look for late duplicates
						if n, _ := c.LLen(context.Background(), queue).Result(); n > int64(read) {
							continue
						}
					}
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	} else {
		tr := tg.open(t, nil)
		c, err := tr.Consume(context.Background(), queue, transport.ConsumeOptions{Prefetch: 256})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		for {
			d, _ := wait()
			if d <= 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			dl, err := c.Receive(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatalf("receive from %s: %v", queue, err)
			}
			add(dl.Body, dl.Key, dl.Headers)
			if err := c.Settle(context.Background(), dl, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	if len(seen) < want {
		t.Fatalf("%s: %d of %d messages arrived within %s", queue, len(seen), want, timeout)
	}
	return out
}

// checkAll fails the test unless every id of want arrived; it returns how many
// messages arrived more than once (the duplicates).
func checkAll(t testing.TB, gots []got, want []string) (duplicates int) {
	t.Helper()
	count := map[string]int{}
	for _, g := range gots {
		count[g.ID]++
	}
	var missing []string
	for _, id := range want {
		if count[id] == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d committed messages missing from the broker (first %s)", len(missing), missing[0])
	}
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	for id, n := range count {
		if !wanted[id] {
			t.Fatalf("message %s arrived but was never committed", id)
		}
		duplicates += n - 1
	}
	return duplicates
}

// data is what the tests' messages carry.
type data struct {
	N int    `json:"n"`
	K string `json:"k,omitempty"`
}

// checkKeyOrder fails the test when the messages of one key (data.k) did not arrive in
// the order they were written (data.n), duplicates aside. It returns how many keyed
// messages it checked.
func checkKeyOrder(t testing.TB, gots []got) {
	t.Helper()
	last := map[string]int{}
	seen := map[string]bool{}
	for _, g := range gots {
		if seen[g.ID] {
			continue
		}
		seen[g.ID] = true
		var d data
		if err := json.Unmarshal([]byte(g.Data), &d); err != nil {
			t.Fatalf("data %s: %v", g.Data, err)
		}
		if d.K == "" {
			continue // rows without a key have no order to keep
		}
		if prev, ok := last[d.K]; ok && d.N < prev {
			t.Fatalf("key %q: message %d arrived after %d", d.K, d.N, prev)
		}
		last[d.K] = d.N
	}
}

// sameBytes reports whether a and b are equal, nil apart from empty.
func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
