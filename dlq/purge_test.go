package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// odd are dead letters the mixed seed lacks: a body that is not UTF-8 with a key that
// is not either, a body without a dead_letter block, an empty body.
func odd(dlqName string) []*transport.Message {
	return []*transport.Message{
		{Queue: dlqName, Body: []byte{0xff, 0xfe, '{', 0x00, 0x80}, Key: []byte{0xc3, 0x28}, Headers: map[string]string{"x": "y"}},
		{Queue: dlqName, Body: []byte(`{"job":"urn:babel:gate:v2","meta":{"schema_version":2}}`), Key: []byte{}},
		{Queue: dlqName, Body: []byte{}},
	}
}

// seededOdd is seeded with n mixed dead letters and the odd ones after them.
func seededOdd(t *testing.T, n int) (*memory.Transport, []*transport.Message) {
	t.Helper()
	tr, s := seeded(t, n)
	all := s.Messages()
	for _, m := range odd("orders.dlq") {
		if err := tr.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		all = append(all, m)
	}
	return tr, all
}

// wire is a message as a multiset key: body, key (none and empty told apart) and
// headers.
func wire(body, key []byte, h map[string]string) string {
	k := "none"
	if key != nil {
		k = fmt.Sprintf("%q", key)
	}
	hs := make([]string, 0, len(h))
	for name, v := range h {
		hs = append(hs, name+"="+v)
	}
	sort.Strings(hs)
	return fmt.Sprintf("%q|%s|%v", body, k, hs)
}

func onQueue(tr *memory.Transport, q string) map[string]int {
	out := map[string]int{}
	for _, s := range tr.Messages(q) {
		out[wire(s.Body, s.Key, s.Headers)]++
	}
	return out
}

func ofMessages(ms []*transport.Message, keep func(*dlq.Entry) bool) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		if keep(dlq.Read(&transport.Delivery{Queue: m.Queue, Body: m.Body, Key: m.Key, Headers: m.Headers})) {
			out[wire(m.Body, m.Key, m.Headers)]++
		}
	}
	return out
}

func ofRecords(t *testing.T, data []byte) map[string]int {
	t.Helper()
	out := map[string]int{}
	r := dlq.NewReader(bytes.NewReader(data))
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, key, err := rec.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		out[wire(body, key, rec.Headers)]++
	}
}

func same(a, b map[string]int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestExportPurgeImport: an export of a selection holds its messages byte for byte and
// leaves the queue as it was; a purge of the selection archived first removes exactly
// the selected messages; the import of the archive puts the queue back as it was.
func TestExportPurgeImport(t *testing.T) {
	ctx := context.Background()
	tr, all := seededOdd(t, 200)
	before := onQueue(tr, "orders.dlq")
	sel, err := dlq.ParseSelect([]string{"reason!=failed"}, now)
	if err != nil {
		t.Fatal(err)
	}
	selected := ofMessages(all, sel)
	unselected := ofMessages(all, func(e *dlq.Entry) bool { return !sel(e) })

	var exp bytes.Buffer
	res, err := dlq.Export(ctx, tr, "orders.dlq", dlq.NewWriter(&exp), dlq.WithSelect(sel))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range selected {
		n += c
	}
	if res.Exported != n || res.Skipped != len(all)-n || res.Stopped != dlq.StopEnd || res.Selected.Total != n {
		t.Fatalf("export %+v, want %d exported", res, n)
	}
	if got := ofRecords(t, exp.Bytes()); !same(got, selected) {
		t.Fatalf("the export holds other messages than the selected ones")
	}
	if !same(onQueue(tr, "orders.dlq"), before) {
		t.Fatalf("an export changed the queue")
	}

	// A dry run counts, by reason and URN, and removes nothing.
	dry, err := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || dry.Removed != n || dry.Kept != len(all)-n || dry.Selected.Total != n {
		t.Fatalf("dry run %+v", dry)
	}
	if reasons := count(dry.Selected.Reasons); reasons["failed"] != 0 || reasons["unknown_urn"] == 0 || reasons["poison"] == 0 || reasons[""] != 3 {
		t.Errorf("dry run reasons %v", reasons)
	}
	if !same(onQueue(tr, "orders.dlq"), before) {
		t.Fatalf("a dry run changed the queue")
	}

	var archive bytes.Buffer
	pr, err := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithExport(dlq.NewWriter(&archive)), dlq.WithIdle(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Removed != n || pr.Exported != n || pr.Stopped != dlq.StopEnd || !pr.Atomic || pr.Group != "" {
		t.Fatalf("purge %+v, want %d removed", pr, n)
	}
	if got := onQueue(tr, "orders.dlq"); !same(got, unselected) {
		t.Fatalf("after the purge the queue holds other messages than the unselected ones")
	}
	if got := ofRecords(t, archive.Bytes()); !same(got, selected) {
		t.Fatalf("the purge's archive holds other messages than the removed ones")
	}

	ir, err := dlq.Import(ctx, tr, dlq.NewReader(&archive))
	if err != nil {
		t.Fatal(err)
	}
	if ir.Imported != n || ir.To["orders.dlq"] != n {
		t.Fatalf("import %+v", ir)
	}
	if !same(onQueue(tr, "orders.dlq"), before) {
		t.Fatalf("export, purge and import did not give back the queue it was")
	}
}

// TestPurgeMax: a maximum stops the purge; what it removed was selected.
func TestPurgeMax(t *testing.T) {
	tr, s := seeded(t, 60)
	sel, _ := dlq.ParseSelect([]string{"reason=poison"}, now)
	var items []dlq.Item
	res, err := dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithMax(3),
		dlq.WithProgress(func(p dlq.Progress) { items = append(items, p.Last) }))
	if err != nil || res.Removed != 3 || res.Stopped != dlq.StopMax {
		t.Fatalf("%+v %v", res, err)
	}
	left := tr.Messages("orders.dlq")
	if len(left) != 57 {
		t.Fatalf("the DLQ holds %d, want 57", len(left))
	}
	poison := 0
	for _, m := range left {
		if dlq.Read(&transport.Delivery{Body: m.Body}).Reason() == "poison" {
			poison++
		}
	}
	if want := s.Count(func(it dlqtest.Item) bool { return it.Poison }) - 3; poison != want {
		t.Errorf("%d poison left, want %d", poison, want)
	}
	removed := 0
	for _, it := range items {
		switch it.Action {
		case dlq.Removed:
			removed++
			if it.Reason != "poison" {
				t.Errorf("removed a %s message", it.Reason)
			}
		case dlq.Kept:
			if it.Why != "not selected" {
				t.Errorf("kept for %q", it.Why)
			}
		default:
			t.Errorf("action %s", it.Action)
		}
	}
	if removed != 3 {
		t.Errorf("%d removals reported", removed)
	}
}

// failingWriter takes n writes, then fails.
type failingWriter struct {
	buf   bytes.Buffer
	n     int
	syncs int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return w.buf.Write(p)
}

func (w *failingWriter) Sync() error { w.syncs++; return nil }

// TestPurgeRemovesOnlyWhatWasArchived: when the archive cannot be written, the purge
// stops and the message whose record failed stays on the queue.
func TestPurgeRemovesOnlyWhatWasArchived(t *testing.T) {
	tr, all := seededOdd(t, 40)
	w := &failingWriter{n: 5}
	res, err := dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithExport(dlq.NewWriter(w)), dlq.WithIdle(50*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "disk full") || res.Stopped != dlq.StopError {
		t.Fatalf("purge with a failing archive: %+v %v", res, err)
	}
	if res.Removed != 5 || res.Exported != 5 || w.syncs != 5 {
		t.Fatalf("%+v, %d syncs; want 5 removed, exported and synced", res, w.syncs)
	}
	if n := len(tr.Messages("orders.dlq")); n != len(all)-5 {
		t.Fatalf("the DLQ holds %d, want %d", n, len(all)-5)
	}
	if got, want := ofRecords(t, w.buf.Bytes()), ofMessages(all[:5], func(*dlq.Entry) bool { return true }); !same(got, want) {
		t.Errorf("the archive holds other messages than the five removed")
	}
}

// groupLog is a memory transport that says its queues are a consumer group's log.
type groupLog struct{ *memory.Transport }

func (groupLog) Group() string { return "ops-group" }

// TestPurgeOnALog: a broker that cannot delete records refuses a purge and changes
// nothing, unless asked to move its group past them.
func TestPurgeOnALog(t *testing.T) {
	mem, s := seeded(t, 30)
	tr := groupLog{mem}
	sel, _ := dlq.ParseSelect([]string{"lang=go"}, now)
	before := onQueue(mem, "orders.dlq")
	res, err := dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel))
	var cre *dlq.CannotRemoveError
	if !errors.Is(err, dlq.ErrCannotRemove) || !errors.As(err, &cre) || cre.Group != "ops-group" || res.Removed != 0 {
		t.Fatalf("purge on a log: %+v %v", res, err)
	}
	if !strings.Contains(err.Error(), "-commit-past") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Errorf("the error does not say what can be done: %v", err)
	}
	if !same(onQueue(mem, "orders.dlq"), before) {
		t.Fatalf("a refused purge changed the queue")
	}
	want := s.Count(func(it dlqtest.Item) bool { return it.Lang == "go" })
	dry, err := dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithDryRun())
	if err != nil || dry.Removed != want || dry.Group != "ops-group" {
		t.Fatalf("dry run on a log: %+v %v", dry, err)
	}
	res, err = dlq.Purge(context.Background(), tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithCommitPast(), dlq.WithIdle(50*time.Millisecond))
	if err != nil || res.Removed != want || res.Group != "ops-group" {
		t.Fatalf("purge past the group: %+v %v", res, err)
	}
	if n := len(mem.Messages("orders.dlq")); n != 30-want {
		t.Errorf("the queue holds %d, want %d", n, 30-want)
	}
}

// TestPurgeInterrupted: a purge whose context ends settles the message in hand and
// says so, without an error.
func TestPurgeInterrupted(t *testing.T) {
	tr, _ := seeded(t, 50)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithProgress(func(p dlq.Progress) {
		if p.Moved == 10 {
			cancel()
		}
	}))
	if err != nil || res.Stopped != dlq.StopInterrupted || res.Removed != 10 {
		t.Fatalf("%+v %v", res, err)
	}
	if n := len(tr.Messages("orders.dlq")); n != 40 {
		t.Errorf("the DLQ holds %d, want 40", n)
	}
	if tr.InFlight("orders.dlq") != 0 {
		t.Errorf("a message is still held")
	}
}

// TestImportTargetAndFailures: an import goes to a chosen queue; a write the broker
// refuses stops it after counting only what was confirmed; a bad line names itself.
func TestImportTargetAndFailures(t *testing.T) {
	ctx := context.Background()
	tr, all := seededOdd(t, 250)
	var exp bytes.Buffer
	if _, err := dlq.Export(ctx, tr, "orders.dlq", dlq.NewWriter(&exp)); err != nil {
		t.Fatal(err)
	}
	res, err := dlq.Import(ctx, tr, dlq.NewReader(bytes.NewReader(exp.Bytes())), dlq.WithTarget("archive.dlq"))
	if err != nil || res.Imported != len(all) || res.To["archive.dlq"] != len(all) {
		t.Fatalf("import to a target: %+v %v", res, err)
	}
	if !same(onQueue(tr, "archive.dlq"), onQueue(tr, "orders.dlq")) {
		t.Fatalf("the target does not hold what was exported")
	}
	dry, err := dlq.Import(ctx, tr, dlq.NewReader(bytes.NewReader(exp.Bytes())), dlq.WithTarget("dry"), dlq.WithDryRun())
	if err != nil || dry.Imported != len(all) || len(tr.Messages("dry")) != 0 {
		t.Fatalf("dry import: %+v %v", dry, err)
	}

	writes := 0
	tr.FailWrites(func(m *transport.Message) error {
		if m.Queue != "refused" {
			return nil
		}
		if writes++; writes > 130 {
			return errors.New("broker says no")
		}
		return nil
	})
	res, err = dlq.Import(ctx, tr, dlq.NewReader(bytes.NewReader(exp.Bytes())), dlq.WithTarget("refused"))
	if err == nil || !errors.Is(err, transport.ErrNotConfirmed) && !strings.Contains(err.Error(), "broker says no") || res.Stopped != dlq.StopError {
		t.Fatalf("import with refused writes: %+v %v", res, err)
	}
	if res.Imported != 130 || len(tr.Messages("refused")) != 130 {
		t.Errorf("counted %d imported, the queue holds %d; want 130", res.Imported, len(tr.Messages("refused")))
	}
	tr.FailWrites(nil)

	lines := strings.SplitAfter(exp.String(), "\n")
	for _, tc := range []struct {
		line, want string
	}{
		{"not json\n", "line 3: not a JSON record"},
		{`{"v":2,"queue":"q","body":"x","key":null}` + "\n", "line 3: format version 2"},
		{`{"v":1,"queue":"q","key":null}` + "\n", "line 3: no body"},
		{`{"v":1,"queue":"q","body_base64":"!!","key":null}` + "\n", "line 3: body_base64"},
		{`{"v":1,"body":"x","key":null}` + "\n", "line 3: the record names no queue"},
	} {
		data := lines[0] + "\n" + tc.line + lines[1]
		res, err := dlq.Import(ctx, tr, dlq.NewReader(strings.NewReader(data)), dlq.WithDryRun())
		if !errors.Is(err, dlq.ErrBadExport) || !strings.Contains(err.Error(), tc.want) || res.Imported != 1 {
			t.Errorf("%q: %+v %v; want %q after one record", tc.line, res, err, tc.want)
		}
	}
}

// TestRecordBytes: a record keeps bodies and keys exactly, whatever they hold, and a
// line of any length reads back.
func TestRecordBytes(t *testing.T) {
	big := bytes.Repeat([]byte(`{"x":"\u2028<&>é"}`), 1<<16) // over a megabyte
	cases := []*transport.Delivery{
		{Queue: "q", Body: big, Key: []byte("k")},
		{Queue: "q", Body: []byte{0, 1, 2, 0xff}, Key: []byte{0xff}},
		{Queue: "q", Body: []byte("\u2028 \"quoted\" \\ <tag>"), Key: []byte{}},
		{Queue: "q", Body: []byte(""), Headers: map[string]string{"traceparent": "00-x", "bq-replay-bypass": "1"}},
		{Queue: "q", Body: []byte(`{"a":1}`), HasAttemptsHeader: true, AttemptsHeader: 7},
	}
	var buf bytes.Buffer
	w := dlq.NewWriter(&buf)
	for _, d := range cases {
		if err := w.Write(dlq.Read(d)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Count() != len(cases) || bytes.Count(buf.Bytes(), []byte("\n")) != len(cases) {
		t.Fatalf("%d records on %d lines", w.Count(), bytes.Count(buf.Bytes(), []byte("\n")))
	}
	r := dlq.NewReader(&buf)
	for i, d := range cases {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		m, err := rec.Message("")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Body, d.Body) || !bytes.Equal(m.Key, d.Key) || (m.Key == nil) != (d.Key == nil) || !same(map[string]int{fmt.Sprint(m.Headers): 1}, map[string]int{fmt.Sprint(d.Headers): 1}) {
			t.Errorf("case %d: %q %q %v, want %q %q %v", i, m.Body[:min(len(m.Body), 40)], m.Key, m.Headers, d.Body[:min(len(d.Body), 40)], d.Key, d.Headers)
		}
		if d.HasAttemptsHeader && m.Attempts != d.AttemptsHeader {
			t.Errorf("case %d: attempts %d, want %d", i, m.Attempts, d.AttemptsHeader)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last record: %v", err)
	}
}
