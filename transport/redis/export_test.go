package redis

import "github.com/babelqueue-go/babelqueue/transport"

// RehomeForTest returns the handle of d as if to had handed it out: what a worker that
// lost its connection presents when it settles late.
func RehomeForTest(from, to transport.Consumer, d *transport.Delivery) any {
	h, ok := d.Handle.(*handle)
	if !ok {
		return nil
	}
	c := to.(*consumer)
	nh := &handle{c: c, member: h.member, raw: h.raw, hdr: h.hdr}
	c.mu.Lock()
	c.out[nh] = false
	c.mu.Unlock()
	return nh
}
