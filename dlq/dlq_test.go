package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func seeded(t *testing.T, n int) (*memory.Transport, dlqtest.Seed) {
	t.Helper()
	tr := memory.New()
	s := dlqtest.Mixed("orders", "orders.dlq", n, now)
	for _, m := range s.Messages() {
		if err := tr.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	return tr, s
}

func count(gs []dlq.Group) map[string]int {
	out := map[string]int{}
	for _, g := range gs {
		out[g.Key] = g.Count
	}
	return out
}

func TestCollectCountsEveryGroup(t *testing.T) {
	tr, s := seeded(t, 200)
	st, err := dlq.Collect(context.Background(), tr, "orders.dlq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != 200 {
		t.Fatalf("total %d, want 200", st.Total)
	}
	reasons := count(st.Reasons)
	for _, r := range []string{"failed", "unknown_urn", "poison"} {
		want := s.Count(func(it dlqtest.Item) bool { return it.Reason == r })
		if reasons[r] != want {
			t.Errorf("reason %s: %d, want %d", r, reasons[r], want)
		}
	}
	langs := count(st.Langs)
	for _, l := range append(dlqtest.Langs, "") {
		want := s.Count(func(it dlqtest.Item) bool { return it.Lang == l })
		if langs[l] != want {
			t.Errorf("lang %q: %d, want %d", l, langs[l], want)
		}
	}
	urns := count(st.URNs)
	for _, u := range []string{dlqtest.URNOrders, dlqtest.URNPayments, dlqtest.URNGhost} {
		want := s.Count(func(it dlqtest.Item) bool { return it.URN == u })
		if urns[u] != want {
			t.Errorf("urn %s: %d, want %d", u, urns[u], want)
		}
	}
	fps := count(st.Errors)
	for _, fp := range []string{dlqtest.FPTimeout, dlqtest.FPRefused, dlqtest.FPUnknown} {
		want := s.Count(func(it dlqtest.Item) bool { return it.Fingerprint == fp })
		if want == 0 || fps[fp] != want {
			t.Errorf("fingerprint %q: %d, want %d (all: %v)", fp, fps[fp], want, fps)
		}
	}
	if len(st.Errors) != 5 {
		t.Errorf("%d error groups, want 5: %v", len(st.Errors), fps)
	}
	if q := count(st.OriginalQueues); q["orders"] != 200 {
		t.Errorf("original queues %v", q)
	}
	if st.Poison != reasons["poison"] {
		t.Errorf("poison %d, reasons %v", st.Poison, reasons)
	}
	oldest, newest := now.Add(-199*time.Second), now
	if st.Oldest == nil || !st.Oldest.Equal(oldest) || !st.Newest.Equal(newest) {
		t.Errorf("oldest %v newest %v, want %v and %v", st.Oldest, st.Newest, oldest, newest)
	}
	// Browsing took nothing.
	if got := len(tr.Messages("orders.dlq")); got != 200 {
		t.Errorf("the DLQ holds %d after stats", got)
	}
}

func TestFingerprint(t *testing.T) {
	for in, want := range map[string]string{
		"order 1042 not found (req 3f2a9c1e-0b7d-4e15-9a43-1c2d3e4f5a6b)": "order <n> not found (req <uuid>)",
		"  deadline   exceeded\n after 2.5s ":                             "deadline exceeded after <n>.<n>s",
		"object 5f3a9c1e0b7d4e15 missing; 0xDEADBEEF99 too":               "object <hex> missing; <hex> too",
		"utf8 and http2 stay words, cafebabe too":                         "utf<n> and http<n> stay words, cafebabe too",
		"": "",
	} {
		if got := dlq.Fingerprint(in); got != want {
			t.Errorf("Fingerprint(%q) = %q, want %q", in, got, want)
		}
	}
	long := dlq.Fingerprint(strings.Repeat("é", 300))
	if len(long) > 204 || !strings.HasSuffix(long, "…") || !strings.HasPrefix(long, "éé") {
		t.Errorf("long fingerprint %q", long)
	}
}

func TestReadEntries(t *testing.T) {
	_, s := seeded(t, 10)
	for i, it := range s.Items {
		e := dlq.Read(&transport.Delivery{Body: it.Message.Body})
		if e.Poison != it.Poison || e.Wrapped != it.Wrapped || e.Reason() != it.Reason || e.ID() != it.ID || e.Lang() != it.Lang {
			t.Errorf("%d: read %+v", i, e)
		}
		if it.Poison && !bytes.Equal(e.Original, it.Redriven) {
			t.Errorf("%d: original %q, want %q", i, e.Original, it.Redriven)
		}
	}
	// A block spliced before white space at the end comes out exactly.
	body := []byte(`{"job":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":2 }`)
	dead, err := envelope.AppendDeadLetter(body, envelope.DeadLetter{Reason: "failed", OriginalQueue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	e := dlq.Read(&transport.Delivery{Body: dead})
	m, err := e.Redriven("", false, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(string(body), `"attempts":2`, `"attempts":0`, 1); string(m.Body) != want {
		t.Errorf("redriven %s, want %s", m.Body, want)
	}
	// A base64 wrap comes back as the bytes it held.
	bad := []byte{0xff, 0xfe, 'x'}
	w := envelope.PoisonBody(bad, envelope.PoisonDeadLetter(errors.New("bad utf-8"), "q", 1, 1))
	e = dlq.Read(&transport.Delivery{Body: w})
	if !e.Wrapped || !bytes.Equal(e.Original, bad) {
		t.Errorf("base64 wrap read as %+v", e)
	}
	if _, err := e.Redriven("", false, false); !errors.Is(err, dlq.ErrNotRedrivable) {
		t.Errorf("poison without asking: %v", err)
	}
	if m, err := e.Redriven("", true, false); err != nil || !bytes.Equal(m.Body, bad) || m.Queue != "q" {
		t.Errorf("poison when asked: %v %+v", err, m)
	}
	// A body with no block and no queue needs a target.
	e = dlq.Read(&transport.Delivery{Body: []byte("just text")})
	if _, err := e.Redriven("", true, false); !errors.Is(err, dlq.ErrNotRedrivable) {
		t.Errorf("no queue: %v", err)
	}
}

func TestParseSelect(t *testing.T) {
	_, s := seeded(t, 60)
	cases := []struct {
		clauses []string
		want    func(dlqtest.Item) bool
	}{
		{[]string{"reason=failed"}, func(it dlqtest.Item) bool { return it.Reason == "failed" }},
		{[]string{"reason=failed|unknown_urn", "lang=python"}, func(it dlqtest.Item) bool { return !it.Poison && it.Lang == "python" }},
		{[]string{"urn=urn:babel:*:created"}, func(it dlqtest.Item) bool { return it.URN == dlqtest.URNOrders }},
		{[]string{"urn!=urn:babel:orders:*"}, func(it dlqtest.Item) bool { return it.URN != dlqtest.URNOrders }},
		{[]string{"error~connection refused"}, func(it dlqtest.Item) bool { return it.Fingerprint == dlqtest.FPRefused }},
		{[]string{"error!~(?i)TIMEOUT"}, func(it dlqtest.Item) bool { return it.Fingerprint != dlqtest.FPTimeout }},
		{[]string{"fingerprint=" + dlqtest.FPTimeout}, func(it dlqtest.Item) bool { return it.Fingerprint == dlqtest.FPTimeout }},
		{[]string{"age>30s"}, func(it dlqtest.Item) bool { return now.Sub(it.FailedAt) > 30*time.Second }},
		{[]string{"age<10s", "queue=orders"}, func(it dlqtest.Item) bool { return now.Sub(it.FailedAt) < 10*time.Second }},
		{[]string{"age>1d"}, func(dlqtest.Item) bool { return false }},
		{nil, func(dlqtest.Item) bool { return true }},
	}
	for _, c := range cases {
		sel, err := dlq.ParseSelect(c.clauses, now)
		if err != nil {
			t.Fatalf("%v: %v", c.clauses, err)
		}
		for i, it := range s.Items {
			if got, want := sel(dlq.Read(&transport.Delivery{Body: it.Message.Body})), c.want(it); got != want {
				t.Errorf("%v on item %d (%s %s %s): %v, want %v", c.clauses, i, it.Reason, it.Lang, it.URN, got, want)
				break
			}
		}
	}
	for _, bad := range []string{"colour=red", "reason", "age>forever", "error~(", "=x"} {
		if _, err := dlq.ParseSelect([]string{bad}, now); !errors.Is(err, dlq.ErrBadSelect) || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseSelect(%q) = %v", bad, err)
		}
	}
}

// bodies returns the bodies on queue.
func bodies(tr *memory.Transport, q string) []string {
	var out []string
	for _, s := range tr.Messages(q) {
		out = append(out, string(s.Body))
	}
	return out
}

func TestRedriveSelectedOnlyKeepsTheRest(t *testing.T) {
	tr, s := seeded(t, 100)
	sel, err := dlq.ParseSelect([]string{"reason=failed", "lang=python|php"}, now)
	if err != nil {
		t.Fatal(err)
	}
	var items []dlq.Item
	res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithIdle(50*time.Millisecond),
		dlq.WithProgress(func(p dlq.Progress) { items = append(items, p.Last) }))
	if err != nil {
		t.Fatal(err)
	}
	want := s.Count(func(it dlqtest.Item) bool { return it.Reason == "failed" && it.Lang != "go" })
	if res.Moved != want || res.To["orders"] != want || res.Stopped != dlq.StopEnd {
		t.Fatalf("result %+v, want %d moved", res, want)
	}
	moved := tr.Messages("orders")
	if len(moved) != want {
		t.Fatalf("orders holds %d, want %d", len(moved), want)
	}
	byID := map[string]dlqtest.Item{}
	for _, it := range s.Items {
		byID[it.ID] = it
	}
	for _, m := range moved {
		env, err := envelope.Decode(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		it := byID[env.Meta.ID]
		if !bytes.Equal(m.Body, it.Redriven) {
			t.Errorf("redriven body\n got %s\nwant %s", m.Body, it.Redriven)
		}
		if !bytes.Equal(m.Key, it.Message.Key) || (m.Key == nil) != (it.Message.Key == nil) || fmt.Sprint(m.Headers) != fmt.Sprint(it.Message.Headers) {
			t.Errorf("key/headers changed: %q %v, want %q %v", m.Key, m.Headers, it.Message.Key, it.Message.Headers)
		}
		if m.Headers[dlq.ReplayBypassHeader] != "" {
			t.Errorf("bypass header without bypass")
		}
	}
	// Everything else is still on the DLQ, unchanged, each once.
	left := tr.Messages("orders.dlq")
	if len(left) != 100-want {
		t.Fatalf("the DLQ holds %d, want %d", len(left), 100-want)
	}
	seen := map[string]int{}
	for _, m := range left {
		seen[string(m.Body)]++
	}
	for _, it := range s.Items {
		if it.Reason == "failed" && it.Lang != "go" {
			continue
		}
		if seen[string(it.Message.Body)] != 1 {
			t.Errorf("a kept message is on the DLQ %d times: %.80s", seen[string(it.Message.Body)], it.Message.Body)
		}
	}
	// The redrive stopped at the last selected message: what came after it is untouched.
	last := 0
	for i, it := range s.Items {
		if it.Reason == "failed" && it.Lang != "go" {
			last = i
		}
	}
	if len(items) != last+1 {
		t.Errorf("looked at %d messages, want %d (up to the last selected one)", len(items), last+1)
	}
}

func TestRedriveDryRunMovesNothing(t *testing.T) {
	tr, s := seeded(t, 50)
	before := bodies(tr, "orders.dlq")
	res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithDryRun(), dlq.WithPoison())
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Moved != 50 || res.Kept != 0 {
		t.Errorf("dry run %+v", res)
	}
	if after := bodies(tr, "orders.dlq"); fmt.Sprint(after) != fmt.Sprint(before) || len(tr.Messages("orders")) != 0 {
		t.Errorf("a dry run changed the queues")
	}
	res, err = dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithDryRun(), dlq.WithMax(7))
	if err != nil || res.Moved != 7 || res.Stopped != dlq.StopMax {
		t.Errorf("dry run with max: %+v %v", res, err)
	}
	_ = s
}

func TestRedriveMaxTargetBypassAndPoison(t *testing.T) {
	tr, s := seeded(t, 30)
	res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithMax(5), dlq.WithTarget("sandbox"), dlq.WithBypass(), dlq.WithIdle(50*time.Millisecond))
	if err != nil || res.Moved != 5 || res.Stopped != dlq.StopMax || res.To["sandbox"] != 5 {
		t.Fatalf("max 5 to sandbox: %+v %v", res, err)
	}
	for _, m := range tr.Messages("sandbox") {
		if m.Headers[dlq.ReplayBypassHeader] != "1" {
			t.Errorf("no bypass header: %v", m.Headers)
		}
	}
	// The rest, poison included, and only poison as its original bytes.
	res, err = dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithPoison(), dlq.WithIdle(50*time.Millisecond))
	if err != nil || res.Moved != 25 || len(tr.Messages("orders.dlq")) != 0 {
		t.Fatalf("the rest: %+v %v, left %d", res, err, len(tr.Messages("orders.dlq")))
	}
	got := map[string]bool{}
	for _, m := range tr.Messages("orders") {
		got[string(m.Body)] = true
	}
	for _, it := range s.Items[5:] {
		if !got[string(it.Redriven)] {
			t.Errorf("missing redriven body %.80q", it.Redriven)
		}
	}
}

func TestRedriveWithoutBrowseWalksOnce(t *testing.T) {
	tr, s := seeded(t, 40)
	res, err := dlq.Redrive(context.Background(), noBrowse{tr}, "orders.dlq", dlq.WithIdle(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	want := s.Count(func(it dlqtest.Item) bool { return !it.Poison })
	if res.Moved != want || res.Kept != 40-want || res.Stopped != dlq.StopEnd {
		t.Errorf("%+v, want %d moved and %d kept", res, want, 40-want)
	}
	if len(tr.Messages("orders.dlq")) != 40-want {
		t.Errorf("the DLQ holds %d", len(tr.Messages("orders.dlq")))
	}
	if _, err := dlq.Redrive(context.Background(), noBrowse{tr}, "orders.dlq", dlq.WithDryRun()); !errors.Is(err, transport.ErrCannotPeek) {
		t.Errorf("dry run without browse: %v", err)
	}
	if _, err := dlq.Collect(context.Background(), noBrowse{tr}, "orders.dlq", nil); !errors.Is(err, transport.ErrCannotPeek) {
		t.Errorf("stats without browse: %v", err)
	}
}

// noBrowse hides the memory broker's Browse.
type noBrowse struct{ transport.Transport }

func TestRedriveFailedWriteLosesNothing(t *testing.T) {
	tr, _ := seeded(t, 10)
	tr.FailWrites(func(m *transport.Message) error {
		if m.Queue == "orders" {
			return errors.New("orders is down")
		}
		return nil
	})
	res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithIdle(50*time.Millisecond))
	if !errors.Is(err, transport.ErrSettleWrite) || res.Stopped != dlq.StopError || res.Moved != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if n := len(tr.Messages("orders.dlq")); n != 10 {
		t.Errorf("the DLQ holds %d after a failed move, want 10", n)
	}
}

func TestRedriveInterruptedSettlesWhatItHolds(t *testing.T) {
	tr, _ := seeded(t, 300)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := dlq.Redrive(ctx, tr, "orders.dlq", dlq.WithProgress(func(p dlq.Progress) {
		if p.Last.Action == dlq.Moved && p.Planned == 240 {
			cancel()
		}
	}))
	if err != nil || res.Stopped != dlq.StopInterrupted || res.Moved != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := len(tr.Messages("orders.dlq")) + len(tr.Messages("orders")); got != 300 || tr.InFlight("orders.dlq") != 0 {
		t.Errorf("%d messages in the two queues, %d in flight", got, tr.InFlight("orders.dlq"))
	}
}

func TestListAndFind(t *testing.T) {
	tr, s := seeded(t, 120)
	sel, _ := dlq.ParseSelect([]string{"lang=go"}, now)
	var ids []string
	var from transport.Cursor
	for pages := 0; ; pages++ {
		p, err := dlq.List(context.Background(), tr, "orders.dlq", from, 7, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			ids = append(ids, e.ID())
		}
		if p.End {
			break
		}
		if len(p.Entries) != 7 || pages > 100 {
			t.Fatalf("a page of %d before the end", len(p.Entries))
		}
		from = p.Next
	}
	var want []string
	for _, it := range s.Items {
		if it.Lang == "go" {
			want = append(want, it.ID)
		}
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("paged ids\n got %v\nwant %v", ids, want)
	}
	e, err := dlq.Find(context.Background(), tr, "orders.dlq", s.Items[77].ID)
	if err != nil || e == nil || !bytes.Equal(e.Delivery.Body, s.Items[77].Message.Body) {
		t.Errorf("Find: %v %v", e, err)
	}
	if e, err := dlq.Find(context.Background(), tr, "orders.dlq", "nope"); e != nil || err != nil {
		t.Errorf("Find of a missing id: %v %v", e, err)
	}
}

func TestBrowseCursors(t *testing.T) {
	tr, _ := seeded(t, 5)
	if _, err := tr.Browse(context.Background(), "orders.dlq", "x", 2); !errors.Is(err, transport.ErrBadCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	p, err := tr.Browse(context.Background(), "nothing-here", "", 10)
	if err != nil || len(p.Deliveries) != 0 || !p.End {
		t.Errorf("empty queue: %+v %v", p, err)
	}
}

// optsRecorder records the options of its consumers and hides whether they settle
// atomically.
type optsRecorder struct {
	transport.Transport
	opts []transport.ConsumeOptions
}

type opaqueConsumer struct{ transport.Consumer }

func (r *optsRecorder) Consume(ctx context.Context, q string, o transport.ConsumeOptions) (transport.Consumer, error) {
	r.opts = append(r.opts, o)
	c, err := r.Transport.Consume(ctx, q, o)
	return opaqueConsumer{c}, err
}

// A redrive asks for a transactional consumer and reports whether its moves were
// atomic: the memory broker's are, a consumer that does not say is not.
func TestRedriveAsksForAtomicMoves(t *testing.T) {
	tr, _ := seeded(t, 10)
	res, err := dlq.Redrive(context.Background(), tr, "orders.dlq", dlq.WithMax(3), dlq.WithIdle(50*time.Millisecond))
	if err != nil || !res.Atomic || res.Moved != 3 {
		t.Fatalf("memory: %+v %v, want 3 moved atomically", res, err)
	}
	rec := &optsRecorder{Transport: tr}
	res, err = dlq.Redrive(context.Background(), rec, "orders.dlq", dlq.WithMax(3), dlq.WithIdle(50*time.Millisecond))
	if err != nil || res.Atomic || res.Moved != 3 {
		t.Fatalf("opaque consumer: %+v %v, want 3 moved, not atomically", res, err)
	}
	if len(rec.opts) != 1 || !rec.opts[0].Transactional {
		t.Fatalf("consume options %+v, want one transactional consumer", rec.opts)
	}
}

// A redrive interrupted (SIGTERM) while its move waits on a silent connection returns
// one settle timeout after the interruption, its settlement and its consumer's Close
// together (before, each had a settle timeout of its own, one after the other), and the
// message stays on the dead-letter queue (issue 38).
func TestRedriveInterruptedOnSilentConnection(t *testing.T) {
	tr, _ := seeded(t, 3)
	const settle = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := dlq.Redrive(ctx, transporttest.SilentSettles(tr), "orders.dlq", dlq.WithSettleTimeout(settle), dlq.WithIdle(time.Minute))
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // a message is received, its move waits
	cancel()
	stopped := time.Now()
	select {
	case <-done:
		took := time.Since(stopped)
		t.Logf("Redrive returned %s after its context ended (settle timeout %s)", took.Round(10*time.Millisecond), settle)
		// One settle timeout from the interruption, and a slack for a loaded machine;
		// before, the move's own timeout and then the Close's (3.7 s here).
		if limit := settle + settle/2; took > limit {
			t.Errorf("Redrive returned %s after its context ended, past %s: the Close had a settle timeout of its own", took.Round(10*time.Millisecond), limit)
		}
	case <-time.After(time.Minute):
		t.Fatal("Redrive still waits on its silent connection a minute after its context ended")
	}
	if got := len(tr.Messages("orders.dlq")); got != 3 {
		t.Errorf("the dead-letter queue holds %d after an abandoned move, want 3", got)
	}
}
