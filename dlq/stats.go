package dlq

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

var (
	uuidRE   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexIDRE  = regexp.MustCompile(`(?i)\b(?:0x)?[0-9a-f]*[0-9][0-9a-f]*\b`)
	numberRE = regexp.MustCompile(`[0-9]+`)
	spaceRE  = regexp.MustCompile(`\s+`)
)

// maxFingerprint bounds the length of a fingerprint, in bytes.
const maxFingerprint = 200

// Fingerprint returns an error text with what varies from one message to the next
// masked, so that one failure of many messages groups as one: UUIDs become <uuid>,
// hexadecimal identifiers of eight digits or more <hex>, other numbers <n>; runs of
// white space are one space and the result is cut at 200 bytes.
//
//	Fingerprint(`order 1042 not found (req 3f2a9c1e-0b7d-4e15-9a43-1c2d3e4f5a6b)`)
//	// order <n> not found (req <uuid>)
func Fingerprint(errText string) string {
	s := uuidRE.ReplaceAllString(errText, "<uuid>")
	s = hexIDRE.ReplaceAllStringFunc(s, func(w string) string {
		if len(strings.TrimPrefix(strings.ToLower(w), "0x")) >= 8 && strings.ContainsAny(strings.ToLower(w), "abcdef") {
			return "<hex>"
		}
		return w
	})
	s = numberRE.ReplaceAllString(s, "<n>")
	s = strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
	if len(s) > maxFingerprint {
		cut := maxFingerprint
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// Group counts the messages that share one value of a field.
type Group struct {
	// Key is the value ("" when the messages do not carry it).
	Key string `json:"key"`
	// Count is how many messages have it.
	Count int `json:"count"`
	// Oldest and Newest are the earliest and latest dead_letter.failed_at among them
	// (nil when none says).
	Oldest *time.Time `json:"oldest,omitempty"`
	Newest *time.Time `json:"newest,omitempty"`
	// Example is one error text of the group (for fingerprints).
	Example string `json:"example,omitempty"`
}

// Stats summarises a dead-letter queue: how many messages, grouped by reason, URN,
// producing language, the queue they failed on and error fingerprint, and the oldest
// and newest dead-letter times. Groups are sorted by count, largest first.
type Stats struct {
	Queue          string     `json:"queue"`
	Total          int        `json:"total"`
	Poison         int        `json:"poison"`
	Oldest         *time.Time `json:"oldest,omitempty"`
	Newest         *time.Time `json:"newest,omitempty"`
	Reasons        []Group    `json:"reasons"`
	URNs           []Group    `json:"urns"`
	Langs          []Group    `json:"langs"`
	OriginalQueues []Group    `json:"original_queues"`
	Errors         []Group    `json:"errors"`
}

// Tally adds messages up into [Stats]. The zero value is ready to use.
type Tally struct {
	total, poison  int
	oldest, newest time.Time
	by             [5]map[string]*Group
}

// Add counts one message.
func (t *Tally) Add(e *Entry) {
	t.total++
	if e.Poison {
		t.poison++
	}
	at := e.FailedAt()
	if !at.IsZero() {
		if t.oldest.IsZero() || at.Before(t.oldest) {
			t.oldest = at
		}
		if at.After(t.newest) {
			t.newest = at
		}
	}
	fp := e.Fingerprint()
	for i, key := range [5]string{e.Reason(), e.URN(), e.Lang(), e.OriginalQueue(), fp} {
		if t.by[i] == nil {
			t.by[i] = map[string]*Group{}
		}
		g := t.by[i][key]
		if g == nil {
			g = &Group{Key: key}
			t.by[i][key] = g
			if i == 4 {
				g.Example = e.Error()
			}
		}
		g.Count++
		if !at.IsZero() {
			if g.Oldest == nil || at.Before(*g.Oldest) {
				g.Oldest = timePtr(at)
			}
			if g.Newest == nil || at.After(*g.Newest) {
				g.Newest = timePtr(at)
			}
		}
	}
}

// Stats returns the counts so far for queue.
func (t *Tally) Stats(queue string) Stats {
	s := Stats{Queue: queue, Total: t.total, Poison: t.poison}
	if !t.oldest.IsZero() {
		s.Oldest, s.Newest = timePtr(t.oldest), timePtr(t.newest)
	}
	groups := make([][]Group, len(t.by))
	for i, m := range t.by {
		groups[i] = []Group{}
		for _, g := range m {
			groups[i] = append(groups[i], *g)
		}
		sort.Slice(groups[i], func(a, b int) bool {
			ga, gb := groups[i][a], groups[i][b]
			if ga.Count != gb.Count {
				return ga.Count > gb.Count
			}
			return ga.Key < gb.Key
		})
	}
	s.Reasons, s.URNs, s.Langs, s.OriginalQueues, s.Errors = groups[0], groups[1], groups[2], groups[3], groups[4]
	return s
}

func timePtr(t time.Time) *time.Time {
	t = t.UTC()
	return &t
}

// PageSize is how many messages a walk over a queue reads per browse call.
const PageSize = 1000

// Collect browses queue without consuming it and counts the messages sel selects (all
// of them when sel is nil). A transport that cannot browse gives an error matching
// [transport.ErrCannotPeek].
func Collect(ctx context.Context, tr transport.Transport, queue string, sel Select) (Stats, error) {
	var t Tally
	err := transport.BrowseAll(ctx, tr, queue, PageSize, func(d *transport.Delivery) bool {
		if e := Read(d); sel == nil || sel(e) {
			t.Add(e)
		}
		return true
	})
	return t.Stats(queue), err
}

// EntryPage is one page of [List].
type EntryPage struct {
	Entries []*Entry
	// Next is the cursor to pass to List for the following page.
	Next transport.Cursor
	// End reports that the queue held nothing further when the page was read.
	End bool
}

// List browses queue from the cursor from and returns up to limit messages that sel
// selects (all when sel is nil), reading as many pages of the broker as it takes.
func List(ctx context.Context, tr transport.Transport, queue string, from transport.Cursor, limit int, sel Select) (EntryPage, error) {
	limit = max(limit, 1)
	out := EntryPage{Next: from}
	for len(out.Entries) < limit {
		p, err := transport.Browse(ctx, tr, queue, out.Next, min(max(limit-len(out.Entries), 50), PageSize))
		if err != nil {
			return out, err
		}
		took := 0
		for _, d := range p.Deliveries {
			if len(out.Entries) == limit {
				break
			}
			took++
			if e := Read(d); sel == nil || sel(e) {
				out.Entries = append(out.Entries, e)
			}
		}
		if took < len(p.Deliveries) {
			// The page holds more than was asked for: resume right after the last
			// one taken.
			q, err := transport.Browse(ctx, tr, queue, out.Next, took)
			if err != nil {
				return out, err
			}
			out.Next = q.Next
			return out, nil
		}
		if p.End || len(p.Deliveries) == 0 && p.Next == out.Next {
			out.Next, out.End = p.Next, true
			return out, nil
		}
		out.Next = p.Next
	}
	return out, nil
}

// Find browses queue for the message whose meta.id is id and returns it, or nil when
// the queue holds none.
func Find(ctx context.Context, tr transport.Transport, queue, id string) (*Entry, error) {
	var found *Entry
	err := transport.BrowseAll(ctx, tr, queue, PageSize, func(d *transport.Delivery) bool {
		if e := Read(d); e.ID() == id {
			found = e
			return false
		}
		return true
	})
	return found, err
}
