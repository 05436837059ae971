package pulsar

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.Browser = (*Transport)(nil)

// WithAdminURL sets the http(s) URL of the admin REST API that Browse and QueueStats
// read (admin in the URL; a URL's default is port 8080, 8443 for pulsar+ssl://, of its
// first host; none for [New]), reached with the transport's TLS configuration and token.
func WithAdminURL(u string) Option {
	return func(o *options) {
		if p, err := url.Parse(u); u != "" && (err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "") {
			o.Invalid("WithAdminURL", "want the admin REST API's http(s)://host:port")
			return
		}
		o.adminURL = strings.TrimRight(u, "/")
	}
}

// defaultAdminURL is the admin API next to the first broker of serviceURL.
func defaultAdminURL(serviceURL string) string {
	scheme, hosts, _ := strings.Cut(serviceURL, "://")
	host, _, err := net.SplitHostPort(strings.Split(hosts, ",")[0])
	if err != nil {
		return ""
	}
	if scheme == "pulsar+ssl" {
		return "https://" + net.JoinHostPort(host, "8443")
	}
	return "http://" + net.JoinHostPort(host, "8080")
}

// Browse reads up to limit messages of queue from the cursor from without consuming
// them: those the subscription has not acknowledged, in topic order, read with a reader
// from the position the admin REST API ([WithAdminURL]) reports. The cursor is a
// message position (ledger:entry:batch). Without an admin URL Browse returns a
// [transport.CannotPeekError].
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	if t.opts.adminURL == "" {
		return transport.Page{}, &transport.CannotPeekError{Transport: "pulsar", Reason: "no admin URL: a browse reads the subscription's position through the admin REST API (pulsar.WithAdminURL, or admin= in the URL)"}
	}
	after, err := parsePosition(from)
	if err != nil {
		return transport.Page{}, err
	}
	limit = max(limit, 1)
	adm, name, err := t.adminFor("browse", queue)
	if err != nil {
		return transport.Page{}, err
	}
	st, err := adm.Topics().GetInternalStatsWithContext(ctx, *name)
	if isNotFound(err) {
		return transport.Page{Next: from, End: true}, nil
	}
	if err != nil {
		return transport.Page{}, fmt.Errorf("pulsar: browse %q: internal stats from %s: %w", queue, t.opts.adminURL, err)
	}
	last, ok := readPosition(st.LastConfirmedEntry)
	if !ok {
		return transport.Page{}, fmt.Errorf("pulsar: browse %q: unreadable last entry %q", queue, st.LastConfirmedEntry)
	}
	cur, subscribed := st.Cursors[t.opts.subscription]
	acked := readRanges(cur.IndividuallyDeletedMessages)
	start, inclusive := after, false
	if from == "" {
		start, inclusive = position{ledger: -1, entry: -1, batch: -1}, true
		if md, ok := readPosition(cur.MarkDeletePosition); subscribed && ok {
			start, inclusive = md, false
		}
	}
	if !start.before(last) && !(inclusive && start.ledger < 0) {
		return transport.Page{Next: from, End: true}, nil
	}
	startID := pc.EarliestMessageID()
	if start.ledger >= 0 {
		startID = pc.NewMessageID(start.ledger, start.entry, start.batch, -1)
	}
	r, err := t.client.CreateReader(pc.ReaderOptions{
		Topic:                   queue,
		StartMessageID:          startID,
		StartMessageIDInclusive: inclusive,
		Name:                    "babelqueue-browse",
	})
	if err != nil {
		return transport.Page{}, fmt.Errorf("pulsar: browse %q: reader: %w", queue, err)
	}
	defer r.Close()
	p := transport.Page{Next: from}
	at, exhausted := start, false
	for len(p.Deliveries) < limit && at.entryBefore(last) {
		if !r.HasNext() {
			exhausted = true
			break
		}
		msg, err := r.Next(ctx)
		if err != nil {
			return transport.Page{}, fmt.Errorf("pulsar: browse %q: %w", queue, err)
		}
		id := msg.ID()
		pos := position{ledger: id.LedgerID(), entry: id.EntryID(), batch: id.BatchIdx()}
		if last.entryBefore(pos) {
			exhausted = true // written after the stats were read
			break
		}
		if !inclusive && !pos.after(start) {
			continue // the reader may hand back the start itself
		}
		at = pos
		p.Next = pos.cursor()
		if acked.contains(pos) {
			continue
		}
		d := &transport.Delivery{Queue: queue}
		deliveryFields(d, msg)
		p.Deliveries = append(p.Deliveries, d)
	}
	p.End = exhausted || !at.entryBefore(last)
	return p, nil
}

// position is a message's place in a topic.
type position struct {
	ledger, entry int64
	batch         int32
}

// before orders positions, the batch index last.
func (a position) before(b position) bool {
	if a.ledger != b.ledger {
		return a.ledger < b.ledger
	}
	if a.entry != b.entry {
		return a.entry < b.entry
	}
	return a.batch < b.batch
}

// after reports whether a comes after start: its entry when start names a whole entry
// (batch -1), else its batch index.
func (a position) after(start position) bool {
	if start.batch < 0 {
		return start.entryBefore(a)
	}
	return start.before(a)
}

// entryBefore compares the entries only.
func (a position) entryBefore(b position) bool {
	return a.ledger < b.ledger || a.ledger == b.ledger && a.entry < b.entry
}

func (a position) cursor() transport.Cursor {
	return transport.Cursor(fmt.Sprintf("%d:%d:%d", a.ledger, a.entry, a.batch))
}

func parsePosition(c transport.Cursor) (position, error) {
	if c == "" {
		return position{}, nil
	}
	f := strings.Split(string(c), ":")
	if len(f) == 3 {
		l, err1 := strconv.ParseInt(f[0], 10, 64)
		e, err2 := strconv.ParseInt(f[1], 10, 64)
		b, err3 := strconv.ParseInt(f[2], 10, 32)
		if err1 == nil && err2 == nil && err3 == nil && l >= 0 && e >= 0 && b >= -1 {
			return position{ledger: l, entry: e, batch: int32(b)}, nil
		}
	}
	return position{}, &transport.BadCursorError{Cursor: c, Reason: "want ledger:entry:batch"}
}

// readPosition reads "ledger:entry" as the admin API writes it.
func readPosition(s string) (position, bool) {
	l, e, ok := strings.Cut(s, ":")
	ln, err1 := strconv.ParseInt(l, 10, 64)
	en, err2 := strconv.ParseInt(e, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return position{}, false
	}
	return position{ledger: ln, entry: en, batch: -1}, true
}

// ackedRange is a range of entries acknowledged one by one, past the mark-delete position.
type ackedRange struct {
	from, to         position
	fromIncl, toIncl bool
}

type ackedRanges []ackedRange

var rangeRE = regexp.MustCompile(`([\(\[])(-?\d+):(-?\d+)\.\.(-?\d+):(-?\d+)([\)\]])`)

// readRanges reads individuallyDeletedMessages: "[(3:5..3:9], (3:12..3:15]]".
func readRanges(s string) ackedRanges {
	var out ackedRanges
	for _, m := range rangeRE.FindAllStringSubmatch(s, -1) {
		n := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
		out = append(out, ackedRange{
			from: position{ledger: n(2), entry: n(3)}, to: position{ledger: n(4), entry: n(5)},
			fromIncl: m[1] == "[", toIncl: m[6] == "]",
		})
	}
	return out
}

func (rs ackedRanges) contains(p position) bool {
	for _, r := range rs {
		above := r.from.entryBefore(p) || r.fromIncl && !p.entryBefore(r.from)
		below := p.entryBefore(r.to) || r.toIncl && !r.to.entryBefore(p)
		if above && below {
			return true
		}
	}
	return false
}
