package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// ErrNoHashTag is returned by Publish and Consume on a Redis Cluster for a queue whose
// keys would not share a hash slot: its name (or, in the Laravel layout, the prefix) has
// no hash tag such as {orders}, so the reserve and settle scripts, which touch every key
// of the queue at once, could not run.
var ErrNoHashTag = errors.New("redis: in a Redis Cluster a queue's name needs a hash tag, such as {orders}, so that its keys share a slot")

// ErrNotReplicated is returned (wrapped, with the counts) by a publish or a settlement
// made with [WithWait] when fewer replicas than asked acknowledged the write within the
// timeout. The write was made on the primary: it may still reach the replicas, or be
// lost if the primary fails before it does; a publish can be made again (a duplicate at
// worst), and a settlement lost that way is a delivery made again.
var ErrNotReplicated = errors.New("redis: fewer replicas than asked acknowledged the write")

// DefaultWaitTimeout is how long a write made with wait=N waits for its replicas when
// wait_timeout is not given.
const DefaultWaitTimeout = time.Second

// WithWait makes every publish and every settle-script call (acks, rewinds, retry and
// dead-letter writes) wait until at least replicas replicas acknowledged it, for at most
// timeout: Redis's WAIT, sent on the connection that made the write, right after it. A
// write that fewer replicas acknowledged fails with [ErrNotReplicated]. Zero replicas
// (the default) sends no WAIT; a negative count, or a timeout not above zero, is an
// error. Deferred acks ([WithDeferredAcks]) are not waited for.
func WithWait(replicas int, timeout time.Duration) Option {
	return func(t *Transport) {
		t.common.SetAtLeastN("WithWait", &t.waitN, replicas, 0)
		t.common.SetAtLeast("WithWait", &t.waitFor, timeout, 1)
	}
}

// parseWait reads wait=N and wait_timeout (a Go duration, or a number of milliseconds).
func parseWait(pq driverkit.Query) (Option, error) {
	n, ok, err := pq.Int("wait", 0, 1000)
	if err != nil {
		return nil, err
	}
	d, dok, err := pq.Duration("wait_timeout", time.Millisecond, time.Millisecond, 0)
	if err != nil {
		return nil, err
	}
	if dok && (!ok || n == 0) {
		return nil, pq.Bad("wait_timeout", "only applies with wait=N (N replicas, 1 or more)")
	}
	if !ok || n == 0 {
		return nil, nil
	}
	if !dok {
		d = DefaultWaitTimeout
	}
	return WithWait(n, d), nil
}

// clientConfig is the go-redis client a URL asks for: one Redis, a primary found through
// Sentinels, or a Redis Cluster; tls points into its options.
type clientConfig struct {
	plain    *goredis.Options
	failover *goredis.FailoverOptions
	cluster  *goredis.ClusterOptions
	tls      **tls.Config
}

func (c *clientConfig) newClient() goredis.UniversalClient {
	switch {
	case c.failover != nil:
		return goredis.NewFailoverClient(c.failover)
	case c.cluster != nil:
		return goredis.NewClusterClient(c.cluster)
	}
	return goredis.NewClient(c.plain)
}

// parseNodes reads the node list of u (driverkit.Hosts) with sentinel=<master name> or
// cluster=1, and the go-redis parameters left in u's query, through go-redis's own URL
// parsers (ParseURL, ParseFailoverURL, ParseClusterURL).
func parseNodes(pq driverkit.Query, u *url.URL) (*clientConfig, error) {
	master, _ := pq.String("sentinel")
	cluster, _, err := pq.Bool("cluster")
	if err != nil {
		return nil, err
	}
	if master != "" && cluster {
		return nil, pq.Bad("sentinel", "sentinel=<master name> and cluster=1 exclude each other")
	}
	if pq.Has("sentinel") && master == "" {
		return nil, pq.Bad("sentinel", "want the master name the Sentinels monitor")
	}
	port := "6379"
	if master != "" {
		port = "26379"
	}
	hosts, err := driverkit.Hosts(u, port)
	if err != nil {
		return nil, pq.Bad("host", err.Error())
	}
	if master == "" && !cluster {
		if len(hosts) > 1 {
			return nil, pq.Bad("host", "several nodes need sentinel=<master name> (they are Sentinels) or cluster=1 (a Redis Cluster)")
		}
		o, err := goredis.ParseURL(u.String())
		if err != nil {
			return nil, goRedisError(pq, err)
		}
		return &clientConfig{plain: o, tls: &o.TLSConfig}, nil
	}
	// go-redis's form: the first node in the host part, the others as addr= parameters.
	g := *u
	g.Host = hosts[0]
	q := g.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	if master != "" {
		q.Set("master_name", master)
		g.RawQuery = q.Encode()
		o, err := goredis.ParseFailoverURL(g.String())
		if err != nil {
			return nil, goRedisError(pq, err)
		}
		// The user info authenticates to the data nodes, as on a plain URL.
		o.Username, o.Password, o.SentinelUsername, o.SentinelPassword = o.SentinelUsername, o.SentinelPassword, "", ""
		return &clientConfig{failover: o, tls: &o.TLSConfig}, nil
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" || pq.Has("db") {
		return nil, pq.Bad("db", "a Redis Cluster has database 0 only")
	}
	g.Path = ""
	g.RawQuery = q.Encode()
	o, err := goredis.ParseClusterURL(g.String())
	if err != nil {
		return nil, goRedisError(pq, err)
	}
	return &clientConfig{cluster: o, tls: &o.TLSConfig}, nil
}

// hashTagged reports whether key has a hash tag: a non-empty part between its first "{"
// and the next "}", which Redis Cluster hashes instead of the whole key.
func hashTagged(key string) bool {
	i := strings.IndexByte(key, '{')
	return i >= 0 && strings.IndexByte(key[i+1:], '}') > 0
}

// checkSlot refuses, on a Redis Cluster, a queue whose keys would not share a slot.
func (t *Transport) checkSlot(queue string) error {
	if t.cluster && !hashTagged(t.ready(queue)) {
		return fmt.Errorf("%w: queue %q (try %q)", ErrNoHashTag, queue, "{"+queue+"}")
	}
	return nil
}

// writer returns the client that makes a write to key followed by WAIT on one
// connection: the transport's client, or on a Redis Cluster the primary that owns key's
// slot (a cluster pipeline would send a WAIT, which has no key, to any node).
func (t *Transport) writer(ctx context.Context, key string) (goredis.UniversalClient, error) {
	if cc, ok := t.client.(*goredis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, key)
		t.reload(ctx, err)
		return c, err
	}
	return t.client, nil
}

// reload makes the cluster client read the slots again after a write sent to a node
// it chose failed (a node gone, MOVED after a failover): go-redis sees none of those
// errors, and would otherwise keep its view of the slots for 10 s.
func (t *Transport) reload(ctx context.Context, err error) {
	if cc, ok := t.client.(*goredis.ClusterClient); ok && err != nil && !errors.Is(err, ErrNotReplicated) {
		cc.ReloadState(ctx)
	}
}

// waitCmd queues WAIT on pipe (the pipeline's read timeout bounds it too: keep
// wait_timeout below read_timeout).
func (t *Transport) waitCmd(ctx context.Context, pipe goredis.Pipeliner) *goredis.Cmd {
	return pipe.Do(ctx, "wait", t.waitN, t.waitFor.Milliseconds())
}

// replicated reads WAIT's answer: an error when fewer replicas than asked acknowledged.
func (t *Transport) replicated(cmd *goredis.Cmd) error {
	n, err := cmd.Int64()
	if err != nil {
		return fmt.Errorf("redis: wait for replicas: %w", err)
	}
	if int(n) < t.waitN {
		return fmt.Errorf("%w (%d of %d within %s)", ErrNotReplicated, n, t.waitN, t.waitFor)
	}
	return nil
}

// runScript runs s, and with [WithWait] then WAIT on the same connection: the script's
// reply, or its error, or [ErrNotReplicated].
func (t *Transport) runScript(ctx context.Context, s *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if t.waitN == 0 {
		return s.Run(ctx, t.client, keys, args...)
	}
	c, err := t.writer(ctx, keys[0])
	if err != nil {
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	// The script and WAIT in one pipeline. EVAL, as the Laravel push under WAIT: a Redis
	// that lost its script cache then costs no second pipeline and no second WAIT.
	pipe := c.Pipeline()
	cmd := s.Eval(ctx, pipe, keys, args...)
	w := t.waitCmd(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	t.reload(ctx, cmd.Err())
	if cmd.Err() == nil {
		if err := t.replicated(w); err != nil {
			cmd.SetErr(err)
		}
	}
	return cmd
}
