package console_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// wireOf identifies a message by body, key (none and empty told apart) and headers.
func wireOf(body, key []byte, h map[string]string) string {
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

// onBroker is what a queue holds, as a multiset, and the entries by meta.id.
func onBroker(t *testing.T, tr transport.Transport, queue string) (map[string]int, []*dlq.Entry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]int{}
	var es []*dlq.Entry
	if err := transport.BrowseAll(ctx, tr, queue, 1000, func(d *transport.Delivery) bool {
		out[wireOf(d.Body, d.Key, d.Headers)]++
		es = append(es, dlq.Read(d))
		return true
	}); err != nil {
		t.Fatalf("browse %s: %v", queue, err)
	}
	return out, es
}

// fileRecords reads a downloaded export into a multiset.
func fileRecords(t *testing.T, path string) map[string]int {
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
		out[wireOf(body, key, rec.Headers)]++
	}
}

// download waits for the one new file the browser saves into dir.
func download(t *testing.T, dir string, seen map[string]bool) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if seen[e.Name()] || strings.HasSuffix(e.Name(), ".crdownload") {
				continue
			}
			if strings.HasSuffix(e.Name(), ".jsonl") {
				seen[e.Name()] = true
				return filepath.Join(dir, e.Name())
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no download in %s after 60s", dir)
	return ""
}

func sameSet(a, b map[string]int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestDeleteAndExportInChromium drives the dead-letter page's export and delete in
// headless Chromium against real Redis, Kafka and RabbitMQ: three messages picked by
// hand are exported (the download holds exactly them, byte for byte) and deleted (a
// dry run names the count and deletes nothing, the confirmation deletes exactly
// them); then every message of a filter is exported and deleted the same way, and the
// downloaded export, imported back with the library, gives back the queue as it was.
// On Kafka the dry run says that records are not deleted but the consumer group is
// moved past them. It writes a screenshot of the deletion's dry run.
func TestDeleteAndExportInChromium(t *testing.T) {
	b := newBrowser(t)
	dir := t.TempDir()
	b.run("downloads", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir})
		return err
	}))
	seen := map[string]bool{}
	now := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	var live []*liveBroker
	var brokers []console.Broker
	for _, name := range []string{"redis", "kafka", "rabbitmq"} {
		lb := openLive(t, name)
		lb.seedDLQ(t, 30, now)
		live = append(live, lb)
		brokers = append(brokers, lb.broker())
	}
	srv := serve(t, brokers, console.WithSampleInterval(500*time.Millisecond))

	for i, lb := range live {
		t.Run(lb.name, func(t *testing.T) {
			b.t = t
			baseline, _ := onBroker(t, lb.tr, lb.dlq)
			if len(baseline) == 0 {
				t.Fatal("nothing seeded")
			}
			dlqURL := fmt.Sprintf("%s/dlq?%s", srv.URL, q("b", fmt.Sprint(i), "q", lb.dlq))
			b.run("dead-letter page", chromedp.Navigate(dlqURL), chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))

			// Three unknown-URN messages, picked by hand.
			var picks []string
			for _, it := range lb.seed.Items {
				if it.Reason == envelope.ReasonUnknownURN && len(picks) < 3 {
					picks = append(picks, it.ID)
				}
			}
			picked := map[string]bool{}
			for _, id := range picks {
				picked[id] = true
				b.run("pick "+id, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id=%q] input.pick`, id))))
			}
			wantPicked := map[string]int{}
			_, entries := onBroker(t, lb.tr, lb.dlq)
			for _, e := range entries {
				if picked[e.ID()] {
					wantPicked[wireOf(e.Delivery.Body, e.Delivery.Key, e.Delivery.Headers)]++
				}
			}
			b.run("export selected", chromedp.Click(chromedp.CSS(`#export-selected`)))
			if got := fileRecords(t, download(t, dir, seen)); !sameSet(got, wantPicked) {
				t.Fatalf("the export of three picked messages holds %d, want %d: %v", len(got), len(wantPicked), got)
			}
			b.run("dry run", chromedp.Click(chromedp.CSS(`#delete-selected`)), chromedp.WaitVisible(chromedp.CSS(`#del-summary`)))
			if got := eval[string](b, `document.querySelector("#del-summary").dataset.removes`); got != "3" {
				t.Fatalf("the dry run would delete %s, want 3: %s", got, eval[string](b, `document.querySelector("#del-preview").innerText`))
			}
			if txt := eval[string](b, `document.querySelector("#del-preview").innerText`); !strings.Contains(txt, "By reason: 3 unknown_urn") || !strings.Contains(txt, "By URN: 3 "+dlqtest.URNGhost) {
				t.Errorf("the dry run does not count by reason and URN: %s", txt)
			}
			wantButton := "Delete 3 messages"
			if lb.name == "kafka" {
				wantButton = "Move the group past 3 messages"
			}
			if got := eval[string](b, `document.querySelector("#del-go").textContent`); got != wantButton {
				t.Errorf("the confirmation reads %q, want it to name the count", got)
			}
			if hasNote := eval[bool](b, `!!document.querySelector("#del-note")`); hasNote != (lb.name == "kafka") {
				t.Errorf("the dry run's note about a log: shown %v on %s", hasNote, lb.name)
			}
			if lb.name == "redis" || lb.name == "kafka" {
				b.screenshot("delete-dry-run-" + lb.name)
			}
			if got, _ := onBroker(t, lb.tr, lb.dlq); !sameSet(got, baseline) {
				t.Fatalf("the dry run changed the queue")
			}
			b.run("confirm", chromedp.Click(chromedp.CSS(`#del-go`)), chromedp.WaitVisible(chromedp.CSS(`#del-done`)))
			if got := eval[string](b, `document.querySelector("#del-done").dataset.removed`); got != "3" {
				t.Fatalf("deleted %s, want 3: %s", got, eval[string](b, `document.querySelector("#del-preview").innerText`))
			}
			after, entries := onBroker(t, lb.tr, lb.dlq)
			want := map[string]int{}
			for k, n := range baseline {
				if n -= wantPicked[k]; n > 0 {
					want[k] = n
				}
			}
			if !sameSet(after, want) {
				t.Fatalf("after deleting three, the DLQ holds %d messages, want %d", len(entries), len(lb.seed.Items)-3)
			}
			b.noErrors(lb.name + " delete selected")
			// The page reloads with the new count.
			waitFor(t, b, fmt.Sprintf(`document.querySelector('#index-status[data-ready="true"] strong') !== null && document.querySelector('#index-status strong').textContent === "%d"`, len(lb.seed.Items)-3), "the page counts the deletion")

			// Every poison message and unknown URN of python's: a filter, exported,
			// deleted, imported back.
			b.run("filter", chromedp.Navigate(fmt.Sprintf("%s/dlq?%s", srv.URL, q("b", fmt.Sprint(i), "q", lb.dlq, "reason", "poison"))),
				chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))
			before, entries := onBroker(t, lb.tr, lb.dlq)
			poison := map[string]int{}
			for _, e := range entries {
				if e.Reason() == "poison" {
					poison[wireOf(e.Delivery.Body, e.Delivery.Key, e.Delivery.Headers)]++
				}
			}
			b.run("export all shown", chromedp.Click(chromedp.CSS(`#export-all`)))
			file := download(t, dir, seen)
			if got := fileRecords(t, file); !sameSet(got, poison) {
				t.Fatalf("the export of the poison filter holds %d messages, want %d", len(got), len(poison))
			}
			b.run("delete all shown", chromedp.Click(chromedp.CSS(`#delete-all`)), chromedp.WaitVisible(chromedp.CSS(`#del-summary`)))
			n := 0
			for _, c := range poison {
				n += c
			}
			if got := eval[string](b, `document.querySelector("#del-summary").dataset.removes`); got != fmt.Sprint(n) {
				t.Fatalf("the dry run of the filter would delete %s, want %d", got, n)
			}
			b.run("confirm filter", chromedp.Click(chromedp.CSS(`#del-go`)), chromedp.WaitVisible(chromedp.CSS(`#del-done`)))
			after, _ = onBroker(t, lb.tr, lb.dlq)
			rest := map[string]int{}
			for k, c := range before {
				if c -= poison[k]; c > 0 {
					rest[k] = c
				}
			}
			if !sameSet(after, rest) {
				t.Fatalf("after deleting the poison filter the DLQ holds other messages than the rest")
			}
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if res, err := dlq.Import(ctx, lb.tr, dlq.NewReader(f)); err != nil || res.Imported != n {
				t.Fatalf("import of the download: %+v %v", res, err)
			}
			if got, _ := onBroker(t, lb.tr, lb.dlq); !sameSet(got, before) {
				t.Fatalf("the download imported back does not give the queue it was")
			}
			b.noErrors(lb.name + " delete a filter")
		})
	}
	b.t = t
}
