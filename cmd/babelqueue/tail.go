package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

// tailEvent is one line of tail: a message of the trace arrived on a queue, or left it.
type tailEvent struct {
	At       time.Time `json:"at"`
	Event    string    `json:"event"` // "arrived" or "left"
	Broker   string    `json:"broker"`
	Queue    string    `json:"queue"`
	ID       string    `json:"id,omitempty"`
	URN      string    `json:"urn,omitempty"`
	Attempts *int      `json:"attempts,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Error    string    `json:"error,omitempty"`
	Replay   bool      `json:"replay,omitempty"`
}

// tailTarget is one queue on one broker that tail watches.
type tailTarget struct {
	b     *broker
	queue string
	seen  map[[32]byte]tailEvent // messages of the trace on the queue at the last look
}

// queuesFlag collects repeated -queue flags.
type queuesFlag []string

func (q *queuesFlag) String() string     { return strings.Join(*q, ",") }
func (q *queuesFlag) Set(v string) error { *q = append(*q, v); return nil }

func tailCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("tail", stdout, stderr)
	fs := o.flags()
	trace := fs.String("trace", "", "the trace_id to follow (required)")
	var queues queuesFlag
	fs.Var(&queues, "queue", "a queue to watch on every URL without its own #queue,… (repeatable; default: default and its dead-letter queue)")
	every := fs.Duration("interval", 250*time.Millisecond, "how often each queue is looked at")
	limit := fs.Duration("for", 0, "stop after this long (0: until interrupted)")
	count := fs.Int("n", 0, "stop after this many arrivals (0: no limit)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o.finish(err)
	}
	if *trace == "" {
		return o.finish(usageError{"-trace is required"})
	}
	if len(pos) == 0 {
		return o.finish(usageError{"want at least one broker URL (URL#queue,queue names the queues to watch on it)"})
	}
	if *every <= 0 {
		return o.finish(usageError{"-interval must be positive"})
	}
	var targets []*tailTarget
	for _, raw := range pos {
		u, frag := splitFragment(raw)
		b, err := o.open(ctx, u)
		if err != nil {
			return o.finish(err)
		}
		defer b.close()
		qs := []string(queues)
		if frag != "" {
			qs = strings.Split(frag, ",")
		}
		if len(qs) == 0 {
			qs = []string{"default", (&queueFlags{queue: "default"}).name(b)}
		}
		for _, q := range qs {
			if q = strings.TrimSpace(q); q != "" {
				targets = append(targets, &tailTarget{b: b, queue: q, seen: map[[32]byte]tailEvent{}})
			}
		}
	}
	if *limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *limit)
		defer cancel()
	}
	if !o.json {
		names := make([]string, len(targets))
		for i, t := range targets {
			names[i] = t.queue + "@" + t.b.name()
		}
		fmt.Fprintf(stderr, "following trace %s on %s (Ctrl-C to stop)\n", *trace, strings.Join(names, ", "))
	}
	arrivals := 0
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		for _, t := range targets {
			evs, err := t.look(ctx, *trace)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return o.finish(t.b.wrap(err))
			}
			for _, ev := range evs {
				if o.json {
					if err := o.emit(ev); err != nil {
						return err
					}
				} else {
					printTail(stdout, ev)
				}
				if ev.Event == "arrived" {
					arrivals++
				}
			}
			if *count > 0 && arrivals >= *count {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// splitFragment cuts "URL#q1,q2" into the URL and the queue list. A fragment is never
// part of a broker URL.
func splitFragment(raw string) (string, string) {
	u, err := url.Parse(raw)
	if err != nil || u.Fragment == "" {
		return raw, ""
	}
	i := strings.LastIndex(raw, "#")
	return raw[:i], u.Fragment
}

// look browses the queue and returns what changed for the trace since the last look.
func (t *tailTarget) look(ctx context.Context, trace string) ([]tailEvent, error) {
	now := map[[32]byte]tailEvent{}
	var evs []tailEvent
	err := transport.BrowseAll(ctx, t.b.tr, t.queue, dlq.PageSize, func(d *transport.Delivery) bool {
		e := dlq.Read(d)
		if e.TraceID() != trace {
			return true
		}
		sum := sha256.Sum256(d.Body)
		if ev, ok := t.seen[sum]; ok {
			now[sum] = ev
			return true
		}
		ev := tailEvent{At: time.Now().UTC(), Event: "arrived", Broker: t.b.name(), Queue: t.queue, ID: e.ID(), URN: e.URN(),
			Reason: e.Reason(), Error: e.Error(), Replay: d.Headers[dlq.ReplayBypassHeader] == "1"}
		if e.Envelope != nil {
			n := e.Envelope.Attempts
			ev.Attempts = &n
		}
		now[sum] = ev
		evs = append(evs, ev)
		return true
	})
	if err != nil {
		if errors.Is(err, transport.ErrCannotPeek) {
			return nil, fmt.Errorf("tail cannot watch %s: %w", t.queue, err)
		}
		return nil, err
	}
	for sum, ev := range t.seen {
		if _, still := now[sum]; !still {
			ev.At, ev.Event = time.Now().UTC(), "left"
			evs = append(evs, ev)
		}
	}
	t.seen = now
	return evs, nil
}

func printTail(w io.Writer, ev tailEvent) {
	mark := "+"
	if ev.Event == "left" {
		mark = "-"
	}
	line := fmt.Sprintf("%s %s %s@%s %s", ev.At.Local().Format("15:04:05.000"), mark, ev.Queue, ev.Broker, ev.URN)
	if ev.ID != "" {
		line += " id=" + ev.ID
	}
	if ev.Attempts != nil {
		line += fmt.Sprintf(" attempts=%d", *ev.Attempts)
	}
	if ev.Replay {
		line += " replay"
	}
	if ev.Reason != "" {
		line += " dead_letter=" + ev.Reason
		if ev.Error != "" {
			line += ": " + oneLine(ev.Error, 100)
		}
	}
	fmt.Fprintln(w, line)
}
