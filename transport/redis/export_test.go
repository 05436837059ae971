package redis

import (
	"context"
	"net/url"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// RehomeForTest returns a consumer on the transport of to, a consumer of the same
// queue, and a delivery it handed out that holds the reservation of d, which another
// consumer handed out: what a worker that lost its connection presents when it settles
// late.
func RehomeForTest(to transport.Consumer, d *transport.Delivery) (transport.Consumer, *transport.Delivery, error) {
	e, ok := d.Handle.(*driverkit.Entry[res])
	if !ok {
		return nil, nil, driverkit.ErrForeign
	}
	c := to.(*kitConsumer).d
	k, err := driverkit.New[res](&replay{consumer: c, r: e.Value}, driverkit.Config{Broker: "redis", Queue: c.queue, AtomicAcks: true},
		transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	late, err := k.Receive(ctx)
	return k, late, err
}

// replay is a consumer's driver whose one Receive hands out r again.
type replay struct {
	*consumer
	r    res
	done bool
}

func (p *replay) Receive(ctx context.Context, into []res) (int, error) {
	if !p.done {
		p.done = true
		into[0] = p.r
		return 1, nil
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

func (p *replay) Close(context.Context) error { return nil }

// URLOptionsForTest returns what a redis:// URL configures: the visibility timeout, the
// deferred-ack linger and whether the Laravel layout is on.
func URLOptionsForTest(raw string) (retryAfter, linger time.Duration, laravel bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return 0, 0, false, err
	}
	opts, _, err := parseURL(u)
	if err != nil {
		return 0, 0, false, err
	}
	t, err := New(nil, opts...)
	if err != nil {
		return 0, 0, false, err
	}
	return t.retryAfter, t.ackLinger, t.laravel, nil
}

// LogForTest logs msg through the logger of tr, a *Transport.
func LogForTest(tr transport.Transport, msg string) { tr.(*Transport).common.Logger.Warn(msg) }

// NodesForTest returns the client a redis:// URL asks for: "plain", "sentinel" or
// "cluster", the addresses (the Sentinels' for "sentinel"), the master name, and the
// data nodes' user name and password.
func NodesForTest(raw string) (mode string, addrs []string, master, user, pass string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, "", "", "", err
	}
	_, cfg, err := parseURL(u)
	switch {
	case err != nil:
		return "", nil, "", "", "", err
	case cfg.failover != nil:
		o := cfg.failover
		return "sentinel", o.SentinelAddrs, o.MasterName, o.Username, o.Password, nil
	case cfg.cluster != nil:
		return "cluster", cfg.cluster.Addrs, "", cfg.cluster.Username, cfg.cluster.Password, nil
	}
	return "plain", []string{cfg.plain.Addr}, "", cfg.plain.Username, cfg.plain.Password, nil
}

// ScoreAtForTest is scoreAt: a time as the sorted-set score the scripts write.
var ScoreAtForTest = scoreAt

// TokenForTest returns a fresh reservation token of t.
func TokenForTest(t *Transport) string { return t.token() }

// ReserveWokenForTest is the reserve script a consumer sends behind its blocking look
// (default layout), for benchmarks that run it from a raw client beside the transport.
var ReserveWokenForTest = reserveWoken
