package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// BrowseOptions describes how a broker browses, for [RunBrowse].
type BrowseOptions struct {
	// Unordered says pages may come in any order (SQS): the kit then checks the set
	// of messages, not their order.
	Unordered bool
	// Settle waits this long after the writes before the first browse, for brokers
	// whose writes become visible to a browse a moment after they are confirmed.
	Settle time.Duration
	// EmptyKeyIsNoKey says the broker cannot tell an empty key from none (Pulsar): an
	// empty key written comes back nil.
	EmptyKeyIsNoKey bool
}

// RunBrowse checks the [transport.Browser] of the transport cfg opens against its
// broker: a queue is paged through whole, in order, bodies, keys and headers exact;
// browsing twice shows the same messages and takes none of them (a consumer then
// receives every one, once); the last page reports the end; an unknown cursor
// matches [transport.ErrBadCursor]; a queue nobody wrote to is empty.
func RunBrowse(t *testing.T, cfg Config, opts BrowseOptions) {
	cfg.defaults()
	t.Run("PagesEveryMessageExactly", func(t *testing.T) { testBrowsePages(t, cfg, opts) })
	t.Run("BadCursorAndEmptyQueue", func(t *testing.T) { testBrowseEdges(t, cfg) })
}

func browseAll(t *testing.T, tr transport.Transport, q string, page int) ([]*transport.Delivery, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*transport.Delivery
	var from transport.Cursor
	pages := 0
	for {
		p, err := transport.Browse(ctx, tr, q, from, page)
		if err != nil {
			t.Fatalf("Browse(%q, %q, %d): %v", q, from, page, err)
		}
		pages++
		if len(p.Deliveries) > page {
			t.Fatalf("Browse returned %d messages, more than the %d asked for", len(p.Deliveries), page)
		}
		for _, d := range p.Deliveries {
			if d.Handle != nil {
				t.Fatalf("a browsed delivery has a handle: it could be settled")
			}
		}
		out = append(out, p.Deliveries...)
		if p.End {
			return out, pages
		}
		if len(p.Deliveries) == 0 && p.Next == from || pages > 1000 {
			t.Fatalf("Browse makes no progress at %q", from)
		}
		from = p.Next
	}
}

func describe(d *transport.Delivery) string {
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k+"="+d.Headers[k])
	}
	sort.Strings(keys)
	key := "<nil>"
	if d.Key != nil {
		key = fmt.Sprintf("%q", d.Key)
	}
	return fmt.Sprintf("body=%s key=%s headers=%v", d.Body, key, keys)
}

func describeMsg(m *transport.Message, opts BrowseOptions) string {
	key := m.Key
	if opts.EmptyKeyIsNoKey && len(key) == 0 {
		key = nil
	}
	return describe(&transport.Delivery{Body: m.Body, Key: key, Headers: m.Headers})
}

func testBrowsePages(t *testing.T, cfg Config, opts BrowseOptions) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	ms := confirmedBatch(q, 23, !cfg.NoKeys)
	if err := publishConfirmed(t, tr, ms); err != nil {
		t.Fatalf("PublishConfirmed: %v", err)
	}
	time.Sleep(opts.Settle)
	want := make([]string, len(ms))
	for i, m := range ms {
		want[i] = describeMsg(m, opts)
	}
	check := func(round string, got []*transport.Delivery) {
		t.Helper()
		for _, d := range got {
			if d.Queue != q {
				t.Errorf("%s: delivery of queue %q, want %q", round, d.Queue, q)
			}
		}
		if err := compare(got, want, opts.Unordered); err != nil {
			t.Fatalf("%s: %v", round, err)
		}
	}
	got, pages := browseAll(t, tr, q, 5)
	check("pages of 5", got)
	if pages < 5 {
		t.Errorf("23 messages in pages of 5 took %d pages", pages)
	}
	got, _ = browseAll(t, tr, q, 100)
	check("again, one page", got)
	// Nothing was taken: a consumer receives every message, once. The first five
	// acknowledged, a browse shows exactly the others.
	c := consume(t, cfg, tr, q)
	var received []*transport.Delivery
	for range 5 {
		d := Receive(t, c, cfg.ReceiveTimeout)
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
		received = append(received, d)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = c.Close(closeCtx)
	cancel()
	taken := map[string]bool{}
	for _, d := range received {
		taken[describe(d)] = true
	}
	rest := []string{}
	for _, w := range want {
		if !taken[w] {
			rest = append(rest, w)
		}
	}
	if len(rest) != len(want)-5 {
		t.Fatalf("the five received are not five of the messages written")
	}
	all := want
	want = rest
	waitBrowse(t, cfg, func() error {
		got, _ := browseAll(t, tr, q, 4)
		return compare(got, want, opts.Unordered)
	})
	want = all
	c = consume(t, cfg, tr, q)
	for range len(ms) - 5 {
		d := Receive(t, c, cfg.ReceiveTimeout)
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
		received = append(received, d)
	}
	ExpectNothing(t, c, cfg.QuietPeriod)
	seen := map[string]int{}
	for _, d := range received {
		seen[string(d.Body)]++
	}
	for _, m := range ms {
		if seen[string(m.Body)] != 1 {
			t.Errorf("after browsing, %s was received %d times", m.Body, seen[string(m.Body)])
		}
	}
	// What was consumed is not browsed any more.
	closeCtx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	_ = c.Close(closeCtx)
	cancel()
	waitBrowse(t, cfg, func() error {
		if got, _ := browseAll(t, tr, q, 10); len(got) > 0 {
			return fmt.Errorf("after consuming every message a browse still shows %d, e.g. %s", len(got), bytes.TrimSpace(got[0].Body))
		}
		return nil
	})
}

// waitBrowse retries check until it passes or the receive timeout ends: a broker may
// record an acknowledgement a moment after it confirmed it.
func waitBrowse(t *testing.T, cfg Config, check func() error) {
	t.Helper()
	deadline := time.Now().Add(cfg.ReceiveTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compare checks browsed deliveries against the descriptions of the messages wanted.
func compare(got []*transport.Delivery, want []string, unordered bool) error {
	g := make([]string, len(got))
	for i, d := range got {
		g[i] = describe(d)
	}
	w := append([]string(nil), want...)
	if unordered {
		sort.Strings(g)
		sort.Strings(w)
	}
	if len(g) != len(w) {
		return fmt.Errorf("browsed %d messages, want %d", len(g), len(w))
	}
	for i := range g {
		if g[i] != w[i] {
			return fmt.Errorf("message %d\n got %s\nwant %s", i, g[i], w[i])
		}
	}
	return nil
}

func testBrowseEdges(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := transport.Browse(ctx, tr, q, "", 10)
	if err != nil || len(p.Deliveries) != 0 || !p.End {
		t.Fatalf("browse of a queue nobody wrote to: %d messages, end %v, err %v", len(p.Deliveries), p.End, err)
	}
	for _, bad := range []transport.Cursor{"not-a-cursor", "-1", "{}"} {
		if _, err := transport.Browse(ctx, tr, q, bad, 10); !errors.Is(err, transport.ErrBadCursor) {
			t.Errorf("Browse from cursor %q: %v, want ErrBadCursor", bad, err)
		}
	}
}
