package console

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// maxSearchWalk bounds the messages a search reads of one work queue, and
// maxHits the messages it returns.
const (
	maxSearchWalk = 20_000
	maxHits       = 200
)

type searchHit struct {
	listRow
	BrokerID int    `json:"b"`
	Broker   string `json:"broker"`
	QueueOn  string `json:"queue"`
	DLQ      bool   `json:"dlq"`
	Match    string `json:"match"` // "id" or "trace_id"
}

type searchResult struct {
	Term  string      `json:"term"`
	Hits  []searchHit `json:"hits"`
	Notes []string    `json:"notes"`
	Took  string      `json:"took"`
}

// search looks for a message by meta.id or trace_id: in the index of every
// dead-letter queue, and by reading every work queue whose browse leaves no mark.
func (c *Console) search(ctx context.Context, term string) searchResult {
	start := time.Now()
	res := searchResult{Term: term, Hits: []searchHit{}, Notes: []string{}}
	if term == "" {
		return res
	}
	for _, b := range c.brokers {
		names := make([]string, 0, len(b.known))
		for q := range b.known {
			names = append(names, q)
		}
		sort.Strings(names)
		for _, q := range names {
			if len(res.Hits) >= maxHits {
				res.Notes = append(res.Notes, fmt.Sprintf("the first %d matches only", maxHits))
				break
			}
			role := b.known[q]
			hit := func(r *row, at transport.Cursor, pos int) bool {
				match := ""
				switch term {
				case r.id:
					match = "id"
				case r.trace:
					match = "trace_id"
				default:
					return true
				}
				res.Hits = append(res.Hits, searchHit{listRow: c.listRow(b, q, entry{row: r, page: at, pos: int32(pos)}),
					BrokerID: b.id, Broker: b.name, QueueOn: q, DLQ: role.dlq, Match: match})
				return len(res.Hits) < maxHits
			}
			switch {
			case role.dlq:
				ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
				st, err := c.indexOf(b, q).ready(ictx)
				cancel()
				if err != nil {
					res.Notes = append(res.Notes, fmt.Sprintf("%s %s: not searched: %v", b.name, q, err))
					continue
				}
				for _, e := range st.snap.entries {
					if !hit(e.row, e.page, int(e.pos)) {
						break
					}
				}
			case b.leavesMarks():
				res.Notes = append(res.Notes, fmt.Sprintf("%s %s: not searched: %s", b.name, q, b.marksWarning()))
			default:
				if err := c.searchQueue(ctx, b, q, term, hit); err != nil {
					res.Notes = append(res.Notes, fmt.Sprintf("%s %s: %v", b.name, q, err))
				}
			}
		}
	}
	res.Took = time.Since(start).Round(time.Millisecond).String()
	return res
}

// searchQueue reads a work queue (up to maxSearchWalk messages) for the term.
func (c *Console) searchQueue(ctx context.Context, b *brokerState, q, term string, hit func(*row, transport.Cursor, int) bool) error {
	if _, ok := b.tr.(transport.Browser); !ok {
		return fmt.Errorf("not searched: this broker cannot show a queue without consuming it")
	}
	needle := []byte(term)
	var from transport.Cursor
	read := 0
	for read < maxSearchWalk {
		p, err := transport.Browse(ctx, b.tr, q, from, 1000)
		if err != nil {
			return fmt.Errorf("not searched: %w", err)
		}
		for i, d := range p.Deliveries {
			read++
			if !bytes.Contains(d.Body, needle) {
				continue
			}
			if !hit(readRow(d, nil, map[string]string{}), from, i) {
				return nil
			}
		}
		if p.End || len(p.Deliveries) == 0 && p.Next == from {
			return nil
		}
		from = p.Next
	}
	return fmt.Errorf("searched the first %d messages only", maxSearchWalk)
}

type searchData struct {
	layout
	Result searchResult
}

func (c *Console) searchPage(_ http.ResponseWriter, r *http.Request) (string, any, error) {
	term := strings.TrimSpace(r.URL.Query().Get("q"))
	ctx, cancel := contextTimeout(r, time.Minute)
	defer cancel()
	d := searchData{layout: c.layout(r, "search", "Search"), Result: c.search(ctx, term)}
	d.Search = term
	return "search", d, nil
}

func (c *Console) searchAPI(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := contextTimeout(r, time.Minute)
	defer cancel()
	return writeJSON(w, http.StatusOK, c.search(ctx, strings.TrimSpace(r.URL.Query().Get("q"))))
}
