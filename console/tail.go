package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

func contextTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

// tailEvent is one message the live tail shows.
type tailEvent struct {
	listRow
	SeenAt  int64 `json:"seen_at"`
	Backlog bool  `json:"backlog,omitempty"`
}

// tail settings: how often the queue is read, how many messages already waiting
// are shown when the tail starts, how far back a list is read again (a worker
// taking messages from its head moves the places of the new ones), and how many
// messages one read walks at most.
const (
	tailInterval = time.Second
	tailBacklog  = 20
	tailWindow   = 200
	tailPerPoll  = 20_000
	tailSeen     = 50_000
)

// tailer follows one queue for one live tail.
type tailer struct {
	c      *Console
	b      *brokerState
	queue  string
	cursor transport.Cursor
	caught bool // the walk reached the end once: what follows is new
	// backlog holds the last messages read before the walk first reached the end.
	backlog []tailEvent
	seen    map[string]struct{}
	order   []string
}

func (t *tailer) remember(id string) bool {
	if _, ok := t.seen[id]; ok {
		return false
	}
	t.seen[id] = struct{}{}
	t.order = append(t.order, id)
	if len(t.order) > tailSeen {
		delete(t.seen, t.order[0])
		t.order = t.order[1:]
	}
	return true
}

// poll reads what arrived since the last poll. Until the walk first reaches the
// end of the queue it only remembers what it reads, and then reports the last few
// messages as the backlog.
func (t *tailer) poll(ctx context.Context) ([]tailEvent, error) {
	from := t.cursor
	if off, err := from.Offset(); err == nil {
		if s, err := transport.Stats(ctx, t.b.tr, t.queue); err == nil {
			switch {
			case !t.caught:
				// A list with a count: start near its end instead of walking it.
				from = transport.OffsetCursor(int(max(s.Ready-tailBacklog, 0)))
			case s.Ready < int64(off):
				// Workers took messages from the head: the new ones sit before the
				// cursor. Read the end of the list again; what was seen is skipped.
				from = transport.OffsetCursor(int(max(s.Ready-tailWindow, 0)))
			}
		}
	}
	var events []tailEvent
	read := 0
	now := time.Now().UnixMilli()
	for read < tailPerPoll {
		p, err := transport.Browse(ctx, t.b.tr, t.queue, from, 500)
		if err != nil {
			return events, err
		}
		for i, d := range p.Deliveries {
			read++
			id := ref(d)
			if !t.remember(id) {
				continue
			}
			r := readRow(d, nil, map[string]string{})
			ev := tailEvent{listRow: t.c.listRow(t.b, t.queue, entry{row: r, page: from, pos: int32(i)}), SeenAt: now, Backlog: !t.caught}
			if t.caught {
				events = append(events, ev)
				continue
			}
			t.backlog = append(t.backlog, ev)
			if len(t.backlog) > tailBacklog {
				t.backlog = t.backlog[1:]
			}
		}
		end := p.End || len(p.Deliveries) == 0 && p.Next == from
		from = p.Next
		if end {
			if !t.caught {
				t.caught = true
				events, t.backlog = t.backlog, nil
			}
			break
		}
	}
	t.cursor = from
	return events, nil
}

// tailAPI streams the messages arriving on a queue as server-sent events: a
// "message" event per message, a "status" event after every read.
func (c *Console) tailAPI(w http.ResponseWriter, r *http.Request) error {
	b, q, role, err := c.queue(r)
	if err != nil {
		return err
	}
	if !role.dlq && b.leavesMarks() {
		return &requestError{status: http.StatusForbidden, msg: b.marksWarning()}
	}
	if _, ok := b.tr.(transport.Browser); !ok {
		return &requestError{status: http.StatusNotImplemented, msg: fmt.Sprintf("%s cannot show a queue without consuming it", b.name)}
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel) // Close ends the tails
	defer stop()
	send := func(event string, v any) error {
		data, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return err
		}
		return rc.Flush()
	}
	t := &tailer{c: c, b: b, queue: q, seen: map[string]struct{}{}}
	for {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		events, err := t.poll(pctx)
		pcancel()
		if ctx.Err() != nil {
			return nil
		}
		for _, ev := range events {
			if send("message", ev) != nil {
				return nil
			}
		}
		status := map[string]any{"at": time.Now().UnixMilli(), "caught_up": t.caught}
		if err != nil {
			status["error"] = err.Error()
		}
		if send("status", status) != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tailInterval):
		}
	}
}
