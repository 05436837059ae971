package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.Browser = (*Transport)(nil)

// Browse reads up to limit messages of queue from the place from without taking them:
// LRANGE on the ready list (<q>, or <prefix><q> in the Laravel layout), head first, in
// the order workers reserve them. A framed element is shown unwrapped with its
// headers; in the Laravel layout the headers come from the header hash. Messages
// reserved by a worker (<q>:processing, <prefix><q>:reserved) and messages waiting out
// a delay (<q>:delayed) are not on the ready list and are not shown. The cursor is a
// place in the list ([transport.OffsetCursor]): a page read while workers take from
// the head starts that many messages further on.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	off, limit, err := driverkit.OffsetBrowse("redis", queue, from, limit)
	if err != nil {
		return transport.Page{}, err
	}
	if t.closed.Load() {
		return transport.Page{}, transport.ErrClosed
	}
	ready := t.ready(queue)
	// One more than asked for tells whether the list goes on.
	els, err := t.client.LRange(ctx, ready, int64(off), int64(off+limit)).Result()
	if err != nil {
		return transport.Page{}, fmt.Errorf("redis: browse %q: %w", ready, err)
	}
	p := transport.Page{End: len(els) <= limit}
	if !p.End {
		els = els[:limit]
	}
	hdrs := make([]any, len(els)) // Laravel: the headers JSON of each, from the header hash
	if t.laravel && len(els) > 0 {
		fields := make([]string, len(els))
		for i, el := range els {
			sum := sha1.Sum([]byte(el))
			fields[i] = hex.EncodeToString(sum[:])
		}
		if hdrs, err = t.client.HMGet(ctx, headersKey(ready), fields...).Result(); err != nil {
			return transport.Page{}, fmt.Errorf("redis: browse %q: headers: %w", ready, err)
		}
	}
	for i, el := range els {
		d := &transport.Delivery{Queue: queue}
		hdr, _ := hdrs[i].(string) // Laravel only
		d.Body, d.Headers = t.unwrap(el, hdr)
		p.Deliveries = append(p.Deliveries, d)
	}
	p.Next = transport.OffsetCursor(off + len(p.Deliveries))
	return p, nil
}
