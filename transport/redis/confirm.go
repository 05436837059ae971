package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.ConfirmedPublisher = (*Transport)(nil)

// PublishConfirmed writes msgs in one pipeline, in order, and returns once Redis answered
// every write: each message is stored exactly as [Transport.Publish] stores it (the
// header frame of the default layout, the Laravel layout's push script and header hash,
// the delayed set). Consecutive plain messages to one list go as one RPUSH, so they are
// written together or not at all. When some writes failed the error is a
// *[transport.BatchError]; a write whose reply was lost with the connection is reported
// as failed, though Redis may have applied it.
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if t.isClosed() {
		return transport.ErrClosed
	}
	type write struct {
		op, score, hdr string
		value          []byte
		keys           []string
	}
	errs := make([]error, len(msgs))
	ws := make([]write, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		if m == nil || m.Queue == "" {
			errs[i] = errors.New("redis: message has no queue")
			continue
		}
		w := &ws[i]
		w.op, w.score, w.value, w.hdr, w.keys = t.writeOp(m, now)
		if err := t.checkSize(m.Queue, w.value); err != nil {
			errs[i], *w = err, write{}
			continue
		}
		if w.op == "n" && w.hdr == "" {
			w.keys = append(w.keys, headersKey(t.ready(m.Queue)))
		}
	}
	// cmds[i] are the commands whose replies decide message i.
	cmds := make([][]goredis.Cmder, len(msgs))
	_, _ = t.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := 0; i < len(ws); {
			w := ws[i]
			switch w.op {
			case "r":
				// The plain writes to the same list that follow go in the same RPUSH.
				j := i + 1
				for j < len(ws) && ws[j].op == "r" && ws[j].keys[0] == w.keys[0] {
					j++
				}
				vals := make([]any, 0, j-i)
				for _, n := range ws[i:j] {
					vals = append(vals, n.value)
				}
				cmd := p.RPush(ctx, w.keys[0], vals...)
				for k := i; k < j; k++ {
					cmds[k] = []goredis.Cmder{cmd}
				}
				i = j
				continue
			case "z":
				if w.hdr != "" {
					cmds[i] = append(cmds[i], p.HSet(ctx, w.keys[1], sha1hex(w.value), w.hdr))
				}
				cmds[i] = append(cmds[i], p.ZAdd(ctx, w.keys[0], goredis.Z{Score: mustScore(w.score), Member: w.value}))
			case "n":
				cmds[i] = append(cmds[i], pushNotify.Eval(ctx, p, w.keys, w.value, w.hdr))
			}
			i++
		}
		return nil
	})
	for i, cs := range cmds {
		for _, c := range cs {
			if err := c.Err(); err != nil {
				errs[i] = fmt.Errorf("redis: publish to %q: %w", msgs[i].Queue, err)
				break
			}
		}
	}
	return transport.NewBatchError(errs)
}
