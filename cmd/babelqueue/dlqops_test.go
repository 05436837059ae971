package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The Kafka transport tells dlq.Purge that its queues are a consumer group's log.
var _ dlq.GroupLog = (*kafka.Transport)(nil)

// wireKey identifies a message by what a consumer gets: body, key (none and empty
// told apart) and headers.
func wireKey(body, key []byte, h map[string]string) string {
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

// multiset counts the messages of ds that keep selects (all when keep is nil).
func multiset(ds []*transport.Delivery, keep dlq.Select) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		if keep == nil || keep(dlq.Read(d)) {
			out[wireKey(d.Body, d.Key, d.Headers)]++
		}
	}
	return out
}

// exported reads an export file into a multiset.
func exported(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	r := dlq.NewReader(f)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, key, err := rec.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		out[wireKey(body, key, rec.Headers)]++
	}
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// diff says how two multisets differ, briefly.
func diff(got, want map[string]int) string {
	var b strings.Builder
	n := 0
	for k, c := range want {
		if got[k] != c && n < 3 {
			fmt.Fprintf(&b, "\n  %d× (want %d×) %.160s", got[k], c, k)
			n++
		}
	}
	for k, c := range got {
		if _, ok := want[k]; !ok && n < 6 {
			fmt.Fprintf(&b, "\n  %d× (not wanted) %.160s", c, k)
			n++
		}
	}
	return fmt.Sprintf("%d messages, want %d:%s", total(got), total(want), b.String())
}

// gateRejected is a dead letter the mixed seed lacks: a body the schema-version gate
// rejected, dead-lettered as received, without a dead_letter block.
func gateRejected(dlqName string) *transport.Message {
	return &transport.Message{Queue: dlqName, Body: []byte(`{"job":"urn:babel:gate:v2","trace_id":"t","data":{"é":"\u2028"},"meta":{"schema_version":2}}`),
		Headers: map[string]string{"traceparent": "00-gate"}}
}

// TestExportPurgeImportOnBrokers runs dlq export, dlq purge and dlq import on every
// broker the operating commands support, as a user runs them (the built binary), then
// the same operations through the library: a mixed dead-letter queue (failed,
// unknown URN, poison spliced and wrapped, a gate rejection; keys and headers) is
// exported by a selection (the queue unchanged), purged by it (a dry run first, then
// exactly the selected ones removed, each archived), and imported back; bodies, keys
// and headers are compared as a multiset and the counts must be exact. On Kafka a
// purge without -commit-past changes nothing and says why. Then a purge is killed
// half way: nothing unselected is gone, and the archive holds every message removed.
func TestExportPurgeImportOnBrokers(t *testing.T) {
	binary(t)
	awsTestCredentials(t)
	for _, b := range opsBrokers() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testExportPurgeImport(t, b)
		})
	}
}

func testExportPurgeImport(t *testing.T, b opsBroker) {
	raw := b.url(t)
	q := transporttest.UniqueName("bqpurge")
	dq := b.dlq(q)
	if b.prepare != nil {
		b.prepare(t, raw, q, dq)
	}
	tr := openT(t, raw)
	s := dlqtest.Mixed(q, dq, 300, time.Now())
	ms := append(s.Messages(), gateRejected(dq))
	if !b.keys {
		for _, m := range ms {
			m.Key = nil
		}
	}
	seed(t, tr, ms)
	at := raw + "#" + q // the URL form: the work queue names its dead-letter queue
	dir := t.TempDir()

	// What the broker holds, as it hands it back (Pulsar has no empty key, …).
	baseline := browse(t, tr, dq)
	if len(baseline) != len(ms) {
		t.Fatalf("seeded %d, the DLQ holds %d", len(ms), len(baseline))
	}
	before := multiset(baseline, nil)
	sel, err := dlq.ParseSelect([]string{"reason!=failed"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	selected := multiset(baseline, sel)
	unselected := multiset(baseline, func(e *dlq.Entry) bool { return !sel(e) })
	want := total(selected)
	if want == 0 || total(unselected) == 0 {
		t.Fatalf("the selection is not mixed: %d of %d", want, len(baseline))
	}
	clauses := []string{"-select", "reason!=failed"}

	// Export: the selected messages, byte for byte; the queue as it was.
	expFile := filepath.Join(dir, "export.jsonl")
	var ex struct {
		dlq.ExportResult
	}
	cliJSON(t, &ex, append([]string{"dlq", "export", "-json", "-o", expFile, at}, clauses...)...)
	if ex.Exported != want || ex.Skipped != len(baseline)-want {
		t.Fatalf("export: %+v, want %d exported", ex.ExportResult, want)
	}
	if got := exported(t, expFile); !same(got, selected) {
		t.Fatalf("the export: %s", diff(got, selected))
	}
	if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
		t.Fatalf("an export changed the queue: %s", diff(got, before))
	}
	if r := cli(t, append([]string{"dlq", "export", "-o", expFile, at}, clauses...)...); r.code != 2 || !strings.Contains(r.stderr, "never overwritten") {
		t.Errorf("an export onto an existing file: exit %d %s", r.code, r.stderr)
	}

	// A dry run: what would go, counted by reason and URN; nothing changes.
	var dry struct {
		dlq.PurgeResult
		Items []dlq.Item `json:"items"`
		Note  string     `json:"note"`
	}
	cliJSON(t, &dry, append([]string{"dlq", "purge", "-json", at}, clauses...)...)
	if !dry.DryRun || dry.Removed != want || dry.Kept != len(baseline)-want || len(dry.Items) != want || dry.Selected.Total != want {
		t.Fatalf("dry run: %+v (%d items), want %d", dry.PurgeResult, len(dry.Items), want)
	}
	reasons := groups(dry.Selected.Reasons)
	wantReasons := map[string]int{}
	for _, d := range baseline {
		if e := dlq.Read(d); sel(e) {
			wantReasons[e.Reason()]++
		}
	}
	if fmt.Sprint(reasons) != fmt.Sprint(wantReasons) || len(dry.Selected.URNs) == 0 {
		t.Errorf("dry run by reason %v, want %v", reasons, wantReasons)
	}
	if r := cli(t, append([]string{"dlq", "purge", at}, clauses...)...); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("would remove %d message(s)", want)) ||
		!strings.Contains(r.stdout, "by reason:") || !strings.Contains(r.stdout, "by URN:") || !strings.Contains(r.stdout, "nothing was changed") {
		t.Errorf("the dry run's text: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
		t.Fatalf("a dry run changed the queue: %s", diff(got, before))
	}

	purge := append([]string{"dlq", "purge", "-json", "-yes"}, clauses...)
	if b.name == "kafka" {
		// Kafka cannot delete a record: the purge says so and changes nothing.
		r := cli(t, append(purge, at)...)
		if r.code != 1 || !strings.Contains(r.stderr, "nothing was removed") || !strings.Contains(r.stderr, "-commit-past") {
			t.Fatalf("a purge on Kafka without -commit-past: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
			t.Fatalf("a refused purge changed the queue: %s", diff(got, before))
		}
		purge = append(purge, "-commit-past")
	}

	// The purge: exactly the selected ones removed, each in the archive.
	archive := filepath.Join(dir, "purged.jsonl")
	var res struct {
		dlq.PurgeResult
		Note string `json:"note"`
	}
	cliJSON(t, &res, append(purge, "-export", archive, at)...)
	if res.DryRun || res.Removed != want || res.Exported != want || res.Stopped != dlq.StopEnd {
		t.Fatalf("purge: %+v, want %d removed", res.PurgeResult, want)
	}
	if (b.name == "kafka") != (res.Group != "" && strings.Contains(res.Note, "Kafka deletes no record")) {
		t.Errorf("purge: group %q, note %q", res.Group, res.Note)
	}
	if got := multiset(browse(t, tr, dq), nil); !same(got, unselected) {
		t.Fatalf("after the purge, the DLQ: %s", diff(got, unselected))
	}
	if got := exported(t, archive); !same(got, selected) {
		t.Fatalf("the purge's archive: %s", diff(got, selected))
	}
	if info, err := os.Stat(archive); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the archive's mode: %v %v", info.Mode(), err)
	}

	// The import: the queue is what it was.
	var imp struct {
		dlq.ImportResult
	}
	cliJSON(t, &imp, "dlq", "import", "-json", archive, at)
	if imp.Imported != want || imp.To[dq] != want {
		t.Fatalf("import: %+v, want %d to %s", imp.ImportResult, want, dq)
	}
	if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
		t.Fatalf("after export, purge and import, the DLQ: %s", diff(got, before))
	}

	// The library, the same round trip with another selection.
	testLibraryRoundTrip(t, b, tr, dq, before)

	// Killed half way.
	testPurgeKilled(t, b, raw, tr, dq, before, dir)
}

// testLibraryRoundTrip exports, purges and imports with package dlq itself.
func testLibraryRoundTrip(t *testing.T, b opsBroker, tr transport.Transport, dq string, before map[string]int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sel, err := dlq.ParseSelect([]string{"lang=php|go", "reason=failed|unknown_urn"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	now := browse(t, tr, dq)
	selected, unselected := multiset(now, sel), multiset(now, func(e *dlq.Entry) bool { return !sel(e) })
	want := total(selected)
	var exp bytes.Buffer
	er, err := dlq.Export(ctx, tr, dq, dlq.NewWriter(&exp), dlq.WithSelect(sel))
	if err != nil || er.Exported != want {
		t.Fatalf("library export: %+v %v, want %d", er, err, want)
	}
	var archive bytes.Buffer
	opts := []dlq.Option{dlq.WithSelect(sel), dlq.WithExport(dlq.NewWriter(&archive))}
	if b.name == "kafka" {
		opts = append(opts, dlq.WithCommitPast())
	}
	pr, err := dlq.Purge(ctx, tr, dq, opts...)
	if err != nil || pr.Removed != want || pr.Exported != want {
		t.Fatalf("library purge: %+v %v, want %d", pr, err, want)
	}
	if got := multiset(browse(t, tr, dq), nil); !same(got, unselected) {
		t.Fatalf("after the library's purge, the DLQ: %s", diff(got, unselected))
	}
	if got := recordsOf(t, exp.Bytes()); !same(got, selected) {
		t.Fatalf("the library's export: %s", diff(got, selected))
	}
	if got := recordsOf(t, archive.Bytes()); !same(got, selected) {
		t.Fatalf("the library's archive: %s", diff(got, selected))
	}
	ir, err := dlq.Import(ctx, tr, dlq.NewReader(&archive))
	if err != nil || ir.Imported != want {
		t.Fatalf("library import: %+v %v, want %d", ir, err, want)
	}
	if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
		t.Fatalf("after the library's round trip, the DLQ: %s", diff(got, before))
	}
}

func recordsOf(t *testing.T, data []byte) map[string]int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "records.jsonl")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return exported(t, path)
}

// testPurgeKilled starts a purge with an archive, kills it (SIGKILL) once it removed
// some, and checks that every unselected message is still on the DLQ, that every
// message removed is in the archive, and that nothing else appeared.
func testPurgeKilled(t *testing.T, b opsBroker, raw string, tr transport.Transport, dq string, before map[string]int, dir string) {
	sel, err := dlq.ParseSelect([]string{"reason!=unknown_urn"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	now := browse(t, tr, dq)
	selected, unselected := multiset(now, sel), multiset(now, func(e *dlq.Entry) bool { return !sel(e) })
	archive := filepath.Join(dir, "killed.jsonl")
	args := []string{"dlq", "purge", "-yes", "-select", "reason!=unknown_urn", "-export", archive}
	if b.name == "kafka" {
		args = append(args, "-commit-past")
	}
	run := startOnTerminal(t, append(args, raw+"#"+dq)...)
	if !run.waitFor(90*time.Second, func(screen string) bool { return lastMoved(screen) >= 1 }) {
		_ = run.cmd.Process.Kill()
		_ = run.cmd.Wait()
		t.Fatalf("the purge removed nothing in 90s: %s", run.screen())
	}
	time.Sleep(20 * time.Millisecond)
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := run.cmd.Wait(); err == nil {
		t.Fatalf("the purge finished before it was killed; nothing was tested:\n%s", run.screen())
	}
	time.Sleep(b.settleAfterKill)
	left := multiset(browse(t, tr, dq), nil)
	if b.name == "redis" {
		// What the killed consumer held is on its processing list until the next
		// consumer's sweep puts it back: count it as on the queue.
		for k, c := range multiset(browse(t, tr, dq+":processing"), nil) {
			left[k] += c
		}
	}
	archived := exported(t, archive)
	removed, dups := 0, 0
	for k, c := range unselected {
		switch n := left[k]; {
		case n < c:
			t.Errorf("an unselected message is gone after the kill: %.160s", k)
		case n > c:
			dups += n - c
		}
	}
	for k, c := range selected {
		gone := c - left[k]
		if gone > 0 {
			removed += gone
			if archived[k] < gone {
				t.Errorf("a message was removed and is not in the archive: %.160s", k)
			}
		}
		if left[k] > c {
			t.Errorf("a selected message is on the DLQ %d times, want at most %d: %.160s", left[k], c, k)
		}
	}
	for k := range left {
		if _, ok := before[k]; !ok {
			t.Errorf("the DLQ holds a message that was not there: %.160s", k)
		}
	}
	for k := range archived {
		if _, ok := selected[k]; !ok {
			t.Errorf("the archive holds a message that was not selected: %.160s", k)
		}
	}
	t.Logf("%s: killed after %d removed; %d archived, %d unselected on the DLQ twice", b.name, removed, total(archived), dups)
	if removed == 0 {
		t.Errorf("the kill left nothing removed: the test saw no purge at work")
	}
	if dups > b.maxDuplicates {
		t.Errorf("%d unselected message(s) twice after a kill, want at most %d", dups, b.maxDuplicates)
	}
}

func same(a, b map[string]int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestPurgeCtrlC interrupts a purge with SIGINT, as Ctrl-C does: it stops, says how
// many it removed (exit 130), that number is what the queue lost, and the archive holds
// them.
func TestPurgeCtrlC(t *testing.T) {
	raw, tr, s := seedRedis(t, 3000)
	archive := filepath.Join(t.TempDir(), "purged.jsonl")
	run := startOnTerminal(t, "dlq", "purge", "-yes", "-all", "-export", archive, raw+"#"+s.Queue)
	if !run.waitFor(60*time.Second, func(screen string) bool { return lastMoved(screen) >= 50 }) {
		t.Fatalf("no progress: %s", run.screen())
	}
	if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := run.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("interrupted purge: %v\n%s", err, run.screen())
	}
	// The error line goes to the terminal, which a goroutine of its own reads.
	run.waitFor(5*time.Second, func(screen string) bool { return strings.Contains(screen, "every message removed is in") })
	screen := run.screen()
	at := strings.Index(screen, "removed ")
	var removed int
	if at < 0 {
		t.Fatalf("the summary does not say what was removed:\n%s", screen)
	}
	if _, err := fmt.Sscanf(screen[at:], "removed %d message(s)", &removed); err != nil {
		t.Fatalf("the summary does not say what was removed: %v\n%s", err, screen)
	}
	if !strings.Contains(screen, "interrupted") || !strings.Contains(screen, "every message removed is in "+archive) {
		t.Errorf("the summary does not say it was interrupted and where the removed ones are:\n%s", screen)
	}
	left := len(browse(t, tr, s.DLQ))
	if got := total(exported(t, archive)); removed < 50 || left != 3000-removed || got != removed {
		t.Fatalf("said %d removed; the DLQ holds %d of 3000, the archive %d", removed, left, got)
	}
}

// TestExportProgressOnTerminal: an export to a file draws its progress on a terminal,
// and its summary says where the records went; piped, it draws nothing.
func TestExportProgressOnTerminal(t *testing.T) {
	raw, _, s := seedRedis(t, 200)
	file := filepath.Join(t.TempDir(), "all.jsonl")
	run := startOnTerminal(t, "dlq", "export", "-o", file, raw+"#"+s.Queue)
	if err := run.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// The terminal's side is read by a goroutine of its own: give it what is left.
	run.waitFor(5*time.Second, func(screen string) bool { return strings.Contains(screen, "\r\x1b[K") })
	screen := run.screen()
	if !strings.Contains(screen, "\r\x1b[K") || !strings.Contains(screen, "export "+s.DLQ+" ") || !strings.Contains(screen, "exported 200 message(s) of "+s.DLQ) {
		t.Errorf("no progress bar or summary on the terminal:\n%q", screen)
	}
	r := cli(t, "dlq", "export", raw+"#"+s.Queue)
	if r.code != 0 || strings.Contains(r.stderr, "\r") || strings.Count(r.stdout, "\n") != 200 || !strings.Contains(r.stderr, "exported 200 message(s)") {
		t.Errorf("piped: exit %d, %d lines on stdout, stderr %q", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
}
