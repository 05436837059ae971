package redis_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// sentinelURL and clusterURL are the clustered test brokers (scripts/brokers.sh up
// redis-sentinel redis-cluster).
func sentinelURL(t testing.TB) string {
	return transporttest.BrokerURL(t, "BQ_REDIS_SENTINEL_URL", "redis-sentinel")
}

func clusterURL(t testing.TB) string {
	return transporttest.BrokerURL(t, "BQ_REDIS_CLUSTER_URL", "redis-cluster")
}

// tagged is a queue name of its own with a hash tag: the whole name, as Laravel's
// '{default}'.
func tagged(prefix string) string { return "{" + transporttest.UniqueName(prefix) + "}" }

func TestClusterURLs(t *testing.T) {
	cases := []struct {
		url, mode, master string
		addrs             []string
	}{
		{"redis://u:pw@s1,s2:26380,s3:26381/0?sentinel=bq", "sentinel", "bq", []string{"s1:26379", "s2:26380", "s3:26381"}},
		{"redis://u:pw@n1,n2:7001,n3:7002?cluster=1", "cluster", "", []string{"n1:6379", "n2:7001", "n3:7002"}},
		{"redis://u:pw@n1:7000/0?cluster=true&pool_size=4", "cluster", "", []string{"n1:7000"}},
		{"redis://u:pw@h:6380/2", "plain", "", []string{"h:6380"}},
	}
	for _, tc := range cases {
		mode, addrs, master, user, pass, err := bqredis.NodesForTest(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if mode != tc.mode || master != tc.master || !slices.Equal(addrs, tc.addrs) {
			t.Errorf("%s: %s %q %v, want %s %q %v", tc.url, mode, master, addrs, tc.mode, tc.master, tc.addrs)
		}
		if user != "u" || pass != "pw" { // the user info is the data nodes', on every form
			t.Errorf("%s: data nodes authenticate as %q/%q, want u/pw", tc.url, user, pass)
		}
	}
	bad := []struct{ url, param string }{
		{"redis://:s3cret@h1:1,h2:2/0", "host"},
		{"redis://:s3cret@h1:1,h2:2/0?sentinel=bq&cluster=1", "sentinel"},
		{"redis://:s3cret@h1:1,h2:2/0?sentinel=", "sentinel"},
		{"redis://:s3cret@h1:1,h2:2/1?cluster=1", "db"},
		{"redis://:s3cret@h1:1,h2:2/0?cluster=maybe", "cluster"},
		{"redis://:s3cret@h1:1,,h2:2/0?cluster=1", "host"},
		{"redis://:s3cret@h1:1/0?wait=-1", "wait"},
		{"redis://:s3cret@h1:1/0?wait=x", "wait"},
		{"redis://:s3cret@h1:1/0?wait_timeout=100ms", "wait_timeout"},
		{"redis://:s3cret@h1:1/0?wait=1&wait_timeout=0", "wait_timeout"},
		{"redis://:s3cret@h1:1/0?wait=1&wait_timeout=soon", "wait_timeout"},
	}
	for _, tc := range bad {
		_, err := transport.Open(context.Background(), tc.url)
		var b *transport.BadURLError
		if !errors.Is(err, transport.ErrInvalidOption) || !errors.As(err, &b) || b.Param != tc.param {
			t.Errorf("Open(%s): %v, want a bad %q", tc.url, err, tc.param)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error echoes the password: %v", err)
		}
	}
	if _, err := bqredis.New(nil, bqredis.WithWait(1, 0)); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("WithWait(1, 0): %v, want ErrInvalidOption", err)
	}
}

// TestClusterKit runs the kit's main cases through Sentinel and on the Redis Cluster,
// with and without wait. On the cluster the queues of one case share a hash tag (the
// case's name): a settle write to another queue must stay in the slot of the queue.
func TestClusterKit(t *testing.T) {
	for _, tc := range []struct{ name, query string }{
		{"sentinel", ""},
		{"sentinel-wait", "&wait=1&wait_timeout=500ms"},
		{"cluster", ""},
		{"cluster-wait", "&wait=1&wait_timeout=500ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on queues of its own
			raw := sentinelURL(t)
			if strings.HasPrefix(tc.name, "cluster") {
				raw = clusterURL(t)
			}
			cfg := transporttest.Config{
				NewQueue: func(t *testing.T) string {
					return "{" + t.Name() + "}" + transporttest.UniqueName("-bqtest")
				},
				NoKeys:                true,
				PrefetchBound:         true,
				SettleAfterClose:      true,
				RefusesBadSettlements: true,
				Open: func(t *testing.T) transport.Transport {
					tr, err := transport.Open(ctxT(t), raw+tc.query)
					if err != nil {
						t.Fatal(err)
					}
					return tr
				},
			}
			t.Run("Transport", func(t *testing.T) { transporttest.Run(t, cfg) })
			t.Run("Runtime", func(t *testing.T) { transporttest.RunRuntime(t, cfg) })
		})
	}
}

func TestClusterNeedsHashTag(t *testing.T) {
	ctx := ctxT(t)
	tr, err := transport.Open(ctx, clusterURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	q := transporttest.UniqueName("bqtest-untagged")
	err = tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)})
	if !errors.Is(err, bqredis.ErrNoHashTag) || !strings.Contains(err.Error(), "{"+q+"}") {
		t.Errorf("Publish to %q: %v, want ErrNoHashTag suggesting {%s}", q, err, q)
	}
	if _, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1}); !errors.Is(err, bqredis.ErrNoHashTag) {
		t.Errorf("Consume %q: %v, want ErrNoHashTag", q, err)
	}
	// A prefix with a hash tag keeps every queue of the Laravel layout in its slot.
	lt, err := transport.Open(ctx, clusterURL(t)+"&laravel=1&prefix={bqtest-app}:")
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Close(context.Background())
	if err := lt.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Errorf("Publish under a tagged prefix: %v", err)
	}
	c, err := lt.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, c, 10*time.Second)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Error(err)
	}
	_ = c.Close(ctx)
}

// TestWaitCountsReplicas: with wait=N a publish and a settlement succeed when N replicas
// acknowledged them, and fail with ErrNotReplicated when fewer did (the Sentinel set has
// one replica; a plain Redis none).
func TestWaitCountsReplicas(t *testing.T) {
	ctx := ctxT(t)
	for _, tc := range []struct {
		name, url string
		ok        bool
	}{
		{"sentinel-1-of-1", sentinelURL(t) + "&wait=1&wait_timeout=2s", true},
		{"sentinel-2-of-1", sentinelURL(t) + "&wait=2&wait_timeout=50ms", false},
		{"plain-1-of-0", brokerURL(t) + "?wait=1&wait_timeout=50ms", false},
		{"cluster-1-of-1", clusterURL(t) + "&wait=1&wait_timeout=2s", true},
		{"cluster-2-of-1", clusterURL(t) + "&wait=2&wait_timeout=50ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := transport.Open(ctx, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			q := tagged("bqtest-wait")
			t.Cleanup(func() {
				tr.(*bqredis.Transport).Client().Del(context.Background(), q, q+".dlq", q+":delayed", q+":processing", q+":processing:deadlines")
			})
			check := func(what string, err error) {
				t.Helper()
				switch {
				case tc.ok && err != nil:
					t.Errorf("%s: %v", what, err)
				case !tc.ok && !errors.Is(err, bqredis.ErrNotReplicated):
					t.Errorf("%s: %v, want ErrNotReplicated", what, err)
				}
			}
			check("Publish", tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}))
			check("PublishConfirmed", tr.(transport.ConfirmedPublisher).PublishConfirmed(ctx, []*transport.Message{
				{Queue: q, Body: []byte(`{"n":2}`)}, {Queue: q, Body: []byte(`{"n":3}`), Delay: time.Millisecond}}))
			c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			d := transporttest.Receive(t, c, 10*time.Second) // the write was made on the primary
			check("Settle", c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack,
				Writes: []*transport.Message{{Queue: q + ".dlq", Body: d.Body}}}))
		})
	}
}

// TestClusterInteropPython: the Python SDK 1.24.0 (its RedisTransport on a redis-py
// RedisCluster or Sentinel client) and Go share one queue, both ways: the keys of a queue
// named with a hash tag are the same in both.
func TestClusterInteropPython(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"cluster", clusterURL(t)},
		{"sentinel", sentinelURL(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pyinterop.Python(t)
			q := tagged("bqtest-py")
			script := pyinterop.Script(t, "redis_peer.py")
			produced := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, script, "produce", tc.url, q, "2"))
			seen := runGo(t, tc.url, q, 2)
			for i, m := range seen {
				if m.Envelope.Meta.Lang != "python" || m.ID() != produced[i]["id"] {
					t.Errorf("Go handled %s from %s, want %v from python", m.ID(), m.Envelope.Meta.Lang, produced[i]["id"])
				}
			}
			ctx := ctxT(t)
			app, err := babelqueue.Open(ctx, tc.url, babelqueue.WithQueue(q))
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close(context.Background())
			ids := map[string]bool{}
			for i := range 2 {
				id, err := app.Publish(ctx, interopURN, map[string]any{"n": i, "from": "go"})
				if err != nil {
					t.Fatal(err)
				}
				ids[id] = true
			}
			rows := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, script, "consume", tc.url, q, "2"))
			for _, r := range rows {
				body, _ := r["body"].(string)
				if !strings.Contains(body, `"lang":"go"`) {
					t.Errorf("Python received %s", body)
				}
			}
			if len(rows) != len(ids) {
				t.Errorf("Python received %d messages, want %d", len(rows), len(ids))
			}
		})
	}
}
