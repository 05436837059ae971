package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// liveBroker is a real broker the console test seeds and looks at.
type liveBroker struct {
	name    string
	raw     string
	tr      transport.Transport
	work    string
	dlq     string
	seed    dlqtest.Seed
	cleanup func(t *testing.T, queues ...string)
}

// openLive opens a real broker (failing under CI=true when it does not answer, and
// skipping elsewhere) with a work queue and dead-letter queue of the test's own.
func openLive(t *testing.T, name string) *liveBroker {
	t.Helper()
	env := map[string]string{"redis": "BQ_REDIS_URL", "kafka": "BQ_KAFKA_URL", "rabbitmq": "BQ_AMQP_URL"}[name]
	raw := transporttest.BrokerURL(t, env, name)
	lb := &liveBroker{name: name, raw: raw, work: transporttest.UniqueName("bqconsole")}
	lb.dlq = lb.work + ".dlq"
	switch name {
	case "redis":
		lb.cleanup = func(t *testing.T, queues ...string) {
			opts, err := goredis.ParseURL(raw)
			if err != nil {
				t.Logf("cleanup: %v", err)
				return
			}
			c := goredis.NewClient(opts)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, q := range queues {
				keys, _ := c.Keys(ctx, q+"*").Result()
				if len(keys) > 0 {
					c.Del(ctx, keys...)
				}
			}
		}
	case "kafka":
		// A consumer group of the test's own: a redrive commits offsets.
		lb.raw = withQuery(raw, "group", transporttest.UniqueName("bqconsole-group"))
		lb.cleanup = func(t *testing.T, queues ...string) {
			u, _ := url.Parse(raw)
			cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(u.Host, ",")...))
			if err != nil {
				t.Logf("cleanup: %v", err)
				return
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).DeleteTopics(ctx, queues...); err != nil {
				t.Logf("cleanup: delete topics: %v", err)
			}
		}
	case "rabbitmq":
		lb.cleanup = func(t *testing.T, queues ...string) {
			conn, err := amqp091.Dial(raw)
			if err != nil {
				t.Logf("cleanup: %v", err)
				return
			}
			defer conn.Close()
			for _, q := range queues {
				ch, err := conn.Channel()
				if err != nil {
					return
				}
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, lb.raw)
	if err != nil {
		t.Fatalf("open %s: %v", transport.Redact(lb.raw), err)
	}
	lb.tr = tr
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
		lb.cleanup(t, lb.work, lb.dlq)
	})
	return lb
}

func withQuery(raw, k, v string) string {
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + url.QueryEscape(k) + "=" + url.QueryEscape(v)
}

// seedDLQ writes n known dead letters to the broker's dead-letter queue, confirmed.
func (lb *liveBroker) seedDLQ(t *testing.T, n int, now time.Time) {
	t.Helper()
	lb.seed = dlqtest.Mixed(lb.work, lb.dlq, n, now)
	ms := lb.seed.Messages()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := 0; i < len(ms); i += 2000 {
		if err := transport.PublishConfirmed(ctx, lb.tr, ms[i:min(i+2000, len(ms))]); err != nil {
			t.Fatalf("seed %s: %v", lb.name, err)
		}
	}
}

// broker describes it to the console.
func (lb *liveBroker) broker() console.Broker {
	return console.Broker{URL: lb.raw, Transport: lb.tr, Queues: []console.Queue{{Name: lb.work}}}
}
