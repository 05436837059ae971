package driverkit

import (
	"fmt"
	"strconv"
	"strings"

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

// PartitionCursor is the cursor of a Browse of a partitioned log that holds the offset
// to read next in each partition: "p:offset,p:offset…", in the order of parts.
func PartitionCursor(pos map[int32]int64, parts []int32) transport.Cursor {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(pos[p], 10))
	}
	return transport.Cursor(b.String())
}

// ParsePartitionCursor reads a [PartitionCursor] (the empty cursor holds no offset); one
// that does not parse is a [*transport.BadCursorError].
func ParsePartitionCursor(c transport.Cursor) (map[int32]int64, error) {
	pos := map[int32]int64{}
	if c == "" {
		return pos, nil
	}
	for _, f := range strings.Split(string(c), ",") {
		ps, os, ok := strings.Cut(f, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, &transport.BadCursorError{Cursor: c, Reason: "want partition:offset[,partition:offset…]"}
		}
		pos[int32(p)] = o
	}
	return pos, nil
}
