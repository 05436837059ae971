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
	if t.closed.Load() {
		return transport.ErrClosed
	}
	ws := make([]write, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		ws[i] = t.prepare(m, now)
	}
	return transport.NewBatchError(t.store(ctx, ws))
}

// write is one message as it is stored, from [Transport.writeOp], or why it cannot be.
type write struct {
	queue, op, score, hdr string
	value                 []byte
	keys                  []string
	err                   error
}

// prepare makes m a write, checking its queue and size.
func (t *Transport) prepare(m *transport.Message, now time.Time) (w write) {
	if m == nil || m.Queue == "" {
		w.err = errors.New("redis: message has no queue")
		return w
	}
	if err := t.checkSlot(m.Queue); err != nil {
		return write{queue: m.Queue, err: err}
	}
	w = t.writeOp(m, now)
	w.err = t.common.CheckSize(m.Queue, len(w.value), 0)
	return w
}

// store makes ws (but those with an error already) in one pipeline, in order, and
// returns each one's error. Consecutive plain writes to one list go as one RPUSH; a
// Laravel write is the push script, which also stores the job's headers. With
// [WithWait] the pipeline ends with WAIT; on a Redis Cluster there is then one pipeline
// per primary, sent to it (see [Transport.writer]).
func (t *Transport) store(ctx context.Context, ws []write) []error {
	if t.waitN == 0 || !t.cluster {
		return t.storeOn(ctx, t.client, ws)
	}
	errs := make([]error, len(ws))
	byNode := map[goredis.UniversalClient][]int{} // the writes to each primary, in order
	for i, w := range ws {
		if w.err != nil {
			errs[i] = w.err
			continue
		}
		c, err := t.writer(ctx, w.keys[0])
		if err != nil {
			errs[i] = fmt.Errorf("redis: publish to %q: %w", w.queue, err)
			continue
		}
		byNode[c] = append(byNode[c], i)
	}
	for c, idx := range byNode { // the primaries' keys are apart: any order
		sub := make([]write, len(idx))
		for j, i := range idx {
			sub[j] = ws[i]
		}
		for j, err := range t.storeOn(ctx, c, sub) {
			errs[idx[j]] = err
			t.reload(ctx, err)
		}
	}
	return errs
}

// storeOn is store's pipeline on client c.
func (t *Transport) storeOn(ctx context.Context, c goredis.UniversalClient, ws []write) []error {
	errs := make([]error, len(ws))
	cmds := make([]goredis.Cmder, len(ws)) // the command whose reply decides write i
	type scripted struct {
		i    int
		keys []string
	}
	var laravel []scripted // the writes made by the push script
	pipe := c.Pipeline()
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		switch {
		case w.err != nil:
			errs[i] = w.err
		case w.op == "r":
			// The plain writes to the same list that follow go in the same RPUSH.
			j := i + 1
			for j < len(ws) && ws[j].err == nil && ws[j].op == "r" && ws[j].keys[0] == w.keys[0] {
				j++
			}
			vals := make([]any, 0, j-i)
			for _, n := range ws[i:j] {
				vals = append(vals, n.value)
			}
			cmd := pipe.RPush(ctx, w.keys[0], vals...)
			for k := i; k < j; k++ {
				cmds[k] = cmd
			}
			i = j - 1
		case t.laravel:
			keys := w.keys
			if w.op == "z" { // the delayed set, no notify list, the header hash
				keys = append([]string{keys[0]}, keys...)
			}
			if len(keys) == 2 {
				keys = append(keys, headersKey(t.ready(w.queue)))
			}
			if t.waitN > 0 { // EVAL: a NOSCRIPT made again after the pipeline would miss its WAIT
				cmds[i] = pushLaravel.Eval(ctx, pipe, keys, w.op, w.value, w.score, w.hdr)
				continue
			}
			cmds[i] = pipe.EvalSha(ctx, pushLaravel.Hash(), keys, w.op, w.value, w.score, w.hdr)
			laravel = append(laravel, scripted{i, keys})
		default:
			cmds[i] = pipe.Do(ctx, "zadd", w.keys[0], w.score, w.value)
		}
	}
	var wait *goredis.Cmd
	if t.waitN > 0 {
		wait = t.waitCmd(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	for _, l := range laravel { // Redis lost its script cache (a restart): EVAL instead
		w := ws[l.i]
		cmds[l.i] = evalAgain(ctx, c, pushLaravel, cmds[l.i].(*goredis.Cmd), l.keys, []any{w.op, w.value, w.score, w.hdr})
	}
	var notReplicated error
	if wait != nil {
		notReplicated = t.replicated(wait)
	}
	for i, cmd := range cmds {
		switch {
		case cmd != nil && cmd.Err() != nil:
			errs[i] = fmt.Errorf("redis: publish to %q: %w", ws[i].queue, cmd.Err())
		case cmd != nil && notReplicated != nil:
			errs[i] = fmt.Errorf("redis: publish to %q: %w", ws[i].queue, notReplicated)
		}
	}
	return errs
}
