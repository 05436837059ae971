package driverkit

import (
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
)

// OffsetBrowse reads the arguments of a driver's Browse that pages by place in the queue
// ([transport.OffsetCursor]): the place from names (a cursor of another kind is a
// [*transport.BadCursorError]), and limit raised to at least 1. An empty queue name is
// an error naming broker.
func OffsetBrowse(broker, queue string, from transport.Cursor, limit int) (off, n int, err error) {
	if off, err = from.Offset(); err != nil {
		return 0, 0, err
	}
	if queue == "" {
		return 0, 0, fmt.Errorf("%s: browse: empty queue name", broker)
	}
	return off, max(limit, 1), nil
}

// OffsetPage is the page of a Browse that read got, the messages of queue from its head:
// those at off up to limit of them, each made a delivery by decode, with the cursor after
// the last one. It is the end of the queue when got holds no more than that (read one
// more than off+limit to know whether the queue goes on).
func OffsetPage[M any](off, limit int, got []M, decode func(M) *transport.Delivery) transport.Page {
	p := transport.Page{End: len(got) <= off+limit}
	for i := off; i < len(got) && i < off+limit; i++ {
		p.Deliveries = append(p.Deliveries, decode(got[i]))
	}
	p.Next = transport.OffsetCursor(off + len(p.Deliveries))
	return p
}
