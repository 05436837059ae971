package redis

import (
	"net/url"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/transport"
)

// RehomeForTest returns the handle of d as if to had handed it out: what a worker that
// lost its connection presents when it settles late.
func RehomeForTest(from, to transport.Consumer, d *transport.Delivery) any {
	e, ok := d.Handle.(*ledger.Entry[*handle])
	if !ok {
		return nil
	}
	h := e.Value
	c := to.(*consumer)
	nh, _ := c.book.Add(&handle{c: c, member: h.member, raw: h.raw, hdr: h.hdr})
	return nh
}

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
	t := New(nil, opts...)
	return t.retryAfter, t.ackLinger, t.laravel, nil
}

// LogForTest logs msg through the logger of tr, a *Transport.
func LogForTest(tr transport.Transport, msg string) { tr.(*Transport).log.Warn(msg) }
