package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// bridgeView is what bridge writes with -json.
type bridgeView struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Queue   string `json:"queue"`
	ToQueue string `json:"to_queue"`
	Copy    bool   `json:"copy"`
	Count   int    `json:"count"`
	Stopped string `json:"stopped"`
}

// bridgeWrite is the write that carries d to queue on another broker: the body, key
// and headers as they are, the envelope projected again for the destination's own
// properties, the attempts counter as the source held it.
func bridgeWrite(d *transport.Delivery, queue string) *transport.Message {
	m := &transport.Message{Queue: queue, Body: d.Body, Key: d.Key, Headers: d.Headers}
	if env, err := envelope.Decode(d.Body); err == nil {
		m.Projection = transport.ProjectionOf(env)
		m.Attempts = env.Attempts
	}
	if d.HasAttemptsHeader {
		m.Attempts = d.AttemptsHeader
	}
	return m
}

func bridgeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("bridge", stdout, stderr)
	fs := o.flags()
	queue := fs.String("queue", "", "the queue to take the messages from (required)")
	toQueue := fs.String("to-queue", "", "the queue to write them to on the destination (default: the same name)")
	cp := fs.Bool("copy", false, "copy: browse the source and leave it as it is (default: move, each source message acknowledged only once the destination confirmed it)")
	maxN := fs.Int("max", 0, "carry at most this many messages (0: all)")
	batch := fs.Int("batch", 64, "messages written per confirmed batch")
	idle := fs.Duration("idle", 2*time.Second, "stop once the source gave nothing for this long")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o.finish(err)
	}
	if err := wantArgs(pos, 2, "a source and a destination broker URL"); err != nil {
		return o.finish(err)
	}
	srcURL, srcQueue, err := oneQueue(pos[0])
	if err != nil {
		return o.finish(err)
	}
	dstURL, dstQueue, err := oneQueue(pos[1])
	if err != nil {
		return o.finish(err)
	}
	if err := queueFromURL(fs, "queue", queue, srcQueue); err != nil {
		return o.finish(err)
	}
	if err := queueFromURL(fs, "to-queue", toQueue, dstQueue); err != nil {
		return o.finish(err)
	}
	if *queue == "" {
		return o.finish(usageError{"-queue is required (or SRC_URL#queue)"})
	}
	if *toQueue == "" {
		*toQueue = *queue
	}
	if *batch < 1 || *maxN < 0 {
		return o.finish(usageError{"-batch must be at least 1 and -max not negative"})
	}
	src, err := o.open(ctx, srcURL)
	if err != nil {
		return o.finish(err)
	}
	defer src.close()
	dst, err := o.open(ctx, dstURL)
	if err != nil {
		return o.finish(err)
	}
	defer dst.close()
	if srcURL == dstURL && *queue == *toQueue {
		return o.finish(usageError{"the source and the destination are the same queue"})
	}
	br := &bridge{src: src, dst: dst, queue: *queue, toQueue: *toQueue, max: *maxN, batch: *batch, idle: *idle,
		bar: newBar(stderr, fmt.Sprintf("bridge %s", *queue))}
	var stopped string
	if *cp {
		stopped, err = br.copy(ctx)
	} else {
		stopped, err = br.move(ctx)
	}
	br.bar.finish(br.count, -1, "")
	verb := "moved"
	if *cp {
		verb = "copied"
	}
	if o.json {
		if eerr := o.emit(bridgeView{From: src.name(), To: dst.name(), Queue: *queue, ToQueue: *toQueue, Copy: *cp, Count: br.count, Stopped: stopped}); eerr != nil {
			return eerr
		}
	} else {
		fmt.Fprintf(stdout, "%s %d message(s) from %s on %s to %s on %s\n", verb, br.count, *queue, src.name(), *toQueue, dst.name())
		if stopped == "interrupted" {
			fmt.Fprintf(stdout, "interrupted: each of them was confirmed by %s before it was acknowledged on the source; nothing was lost\n", dst.name())
		}
	}
	if err != nil {
		return o.finish(err)
	}
	if stopped == "interrupted" {
		return o.finish(interruptedError{fmt.Sprintf("%s %d message(s)", verb, br.count)})
	}
	return nil
}

type bridge struct {
	src, dst       *broker
	queue, toQueue string
	max, batch     int
	idle           time.Duration
	count          int
	bar            *bar
}

func (br *bridge) room() int {
	if br.max == 0 {
		return br.batch
	}
	return min(br.batch, br.max-br.count)
}

// copy browses the source and writes each page, confirmed, to the destination.
func (br *bridge) copy(ctx context.Context) (string, error) {
	var from transport.Cursor
	for br.max == 0 || br.count < br.max {
		p, err := transport.Browse(ctx, br.src.tr, br.queue, from, br.room())
		if err != nil {
			if ctx.Err() != nil {
				return "interrupted", nil
			}
			return "error", br.src.wrap(err)
		}
		ms := make([]*transport.Message, len(p.Deliveries))
		for i, d := range p.Deliveries {
			ms[i] = bridgeWrite(d, br.toQueue)
		}
		if err := transport.PublishConfirmed(context.WithoutCancel(ctx), br.dst.tr, ms); err != nil {
			return "error", br.dst.wrap(confirmedCount(err, &br.count))
		}
		br.count += len(ms)
		br.bar.update(br.count, -1, "")
		if p.End || len(p.Deliveries) == 0 {
			return "end", nil
		}
		from = p.Next
	}
	return "max", nil
}

// confirmedCount adds to *n the messages of a failed batch that were confirmed.
func confirmedCount(err error, n *int) error {
	var be *transport.BatchError
	if errors.As(err, &be) {
		*n += len(be.Errs) - len(be.Failed())
	}
	return err
}

// move consumes the source: each batch is written to the destination and, once the
// destination confirmed it, acknowledged on the source; what the destination did not
// confirm goes back to the source.
func (br *bridge) move(ctx context.Context) (string, error) {
	wait := br.idle
	if p, err := transport.Browse(ctx, br.src.tr, br.queue, "", 1); err == nil && len(p.Deliveries) > 0 {
		wait = max(br.idle, 30*time.Second) // messages are there: give the consumer time to start
	}
	c, err := br.src.tr.Consume(ctx, br.queue, transport.ConsumeOptions{Prefetch: br.batch})
	if err != nil {
		return "error", br.src.wrap(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	for br.max == 0 || br.count < br.max {
		var ds []*transport.Delivery
		stopped := ""
		for len(ds) < br.room() {
			w := wait
			if len(ds) > 0 {
				w = 50 * time.Millisecond // a batch does not wait long for its last messages
			}
			rctx, cancel := context.WithTimeout(ctx, w)
			d, err := c.Receive(rctx)
			cancel()
			if err != nil {
				switch {
				case ctx.Err() != nil:
					stopped = "interrupted"
				case errors.Is(err, context.DeadlineExceeded):
					if len(ds) == 0 {
						stopped = "end"
					}
				default:
					return "error", br.src.wrap(err)
				}
				break
			}
			ds = append(ds, d)
		}
		wait = br.idle
		if err := br.carry(ctx, c, ds); err != nil {
			return "error", err
		}
		if stopped != "" {
			return stopped, nil
		}
	}
	return "max", nil
}

// carry writes ds to the destination, then acknowledges the confirmed ones on the
// source and gives the others back.
func (br *bridge) carry(ctx context.Context, c transport.Consumer, ds []*transport.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	ms := make([]*transport.Message, len(ds))
	for i, d := range ds {
		ms[i] = bridgeWrite(d, br.toQueue)
	}
	perr := transport.PublishConfirmed(sctx, br.dst.tr, ms)
	failed := map[int]bool{}
	var be *transport.BatchError
	switch {
	case perr == nil:
	case errors.As(perr, &be):
		for _, i := range be.Failed() {
			failed[i] = true
		}
	default:
		for i := range ds {
			failed[i] = true
		}
	}
	for i, d := range ds {
		out := transport.Ack
		if failed[i] {
			out = transport.Rewind
		}
		if err := c.Settle(sctx, d, transport.Settlement{Outcome: out}); err != nil {
			if out == transport.Ack {
				// Written and confirmed, not acknowledged: the source delivers it
				// again, so the destination may get it twice, never none.
				return br.src.wrap(fmt.Errorf("acknowledge after a confirmed write: %w", err))
			}
			continue
		}
		if out == transport.Ack {
			br.count++
		}
	}
	if err := transport.SyncAcks(sctx, c); err != nil {
		return br.src.wrap(fmt.Errorf("acknowledgements not made durable (the source may deliver these again): %w", err))
	}
	br.bar.update(br.count, -1, "")
	if perr != nil {
		return br.dst.wrap(perr)
	}
	return nil
}
