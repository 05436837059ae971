package redis

import (
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
