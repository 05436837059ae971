package console_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestConsoleInChromium drives the console in headless Chromium against real Redis,
// Kafka and RabbitMQ, each with a dead-letter queue seeded with known messages: the
// pages load without an error in the browser; each dead-letter page shows the groups
// and counts of its seed; a redrive of three selected messages previews them in a
// dry run that moves nothing (checked on the broker), then moves exactly those three
// (checked on the broker); the message, tail and search pages show what they should;
// an action without the CSRF token is refused; the login page logs in; the keyboard
// works. It writes a screenshot of each page (see browser.screenshotDir: with
// BQ_UPDATE_SCREENSHOT=1, to testdata/screenshots and the README's docs/console.png).
func TestConsoleInChromium(t *testing.T) {
	b := newBrowser(t)
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

	// Overview: every dead-letter queue counted by its broker.
	b.run("overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`svg.spark polyline`)))
	for i, lb := range live {
		cell := fmt.Sprintf(`section.broker[data-broker="%d"] td[data-k="dlq"]`, i)
		waitFor(t, b, fmt.Sprintf(`document.querySelector(%q).textContent.trim() === "30"`, cell), lb.name+" DLQ depth 30 on the overview")
	}
	html := eval[string](b, `document.documentElement.outerHTML`)
	if strings.Contains(html, "guest:guest") || !strings.Contains(html, "xxxxx@") {
		t.Errorf("the overview shows a broker password, or no redacted URL")
	}
	b.screenshot("overview")
	b.noErrors("overview")

	for i, lb := range live {
		t.Run(lb.name, func(t *testing.T) {
			b.t = t
			dlqURL := fmt.Sprintf("%s/dlq?%s", srv.URL, q("b", fmt.Sprint(i), "q", lb.dlq))
			b.run("dead-letter page", chromedp.Navigate(dlqURL), chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))
			checkGroups(t, b, lb.seed)
			if lb.name == "redis" {
				b.screenshot("dlq")
				if os.Getenv("BQ_UPDATE_SCREENSHOT") == "1" {
					copyFile(t, filepath.Join(b.screenshotDir(), "dlq.png"), filepath.Join("..", "docs", "console.png"))
				}
			}
			b.noErrors(lb.name + " dead-letter page")

			// Three failed messages, picked by hand.
			var picks []string
			for _, it := range lb.seed.Items {
				if it.Reason == envelope.ReasonFailed && len(picks) < 3 {
					picks = append(picks, it.ID)
				}
			}
			for _, id := range picks {
				b.run("pick "+id, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id=%q] input.pick`, id))))
			}
			b.run("dry run", chromedp.Click(chromedp.CSS(`#redrive-selected`)), chromedp.WaitVisible(chromedp.CSS(`#rd-summary`)))
			if got := eval[string](b, `document.querySelector("#rd-summary").dataset.moves`); got != "3" {
				t.Fatalf("the dry run would move %s messages, want 3: %s", got, eval[string](b, `document.querySelector("#rd-preview").innerText`))
			}
			if lb.name == "redis" {
				b.screenshot("redrive-dry-run")
			}
			// The dry run moved nothing.
			if got := ids(t, lb.tr, lb.dlq); len(got) != 30 {
				t.Fatalf("after the dry run the DLQ holds %d messages, want 30", len(got))
			}
			if got := ids(t, lb.tr, lb.work); len(got) != 0 {
				t.Fatalf("after the dry run the work queue holds %v", got)
			}
			b.run("confirm", chromedp.Click(chromedp.CSS(`#rd-go`)), chromedp.WaitVisible(chromedp.CSS(`#rd-done`)))
			if got := eval[string](b, `document.querySelector("#rd-done").dataset.moved`); got != "3" {
				t.Fatalf("the redrive moved %s, want 3: %s", got, eval[string](b, `document.querySelector("#rd-preview").innerText`))
			}
			// Exactly those three moved, and nothing else.
			work, dead := ids(t, lb.tr, lb.work), ids(t, lb.tr, lb.dlq)
			if len(work) != 3 || len(dead) != 27 {
				t.Fatalf("after the redrive: work queue %d, DLQ %d messages; want 3 and 27", len(work), len(dead))
			}
			for _, id := range picks {
				if !work[id] || dead[id] {
					t.Errorf("%s: on the work queue %v, on the DLQ %v", id, work[id], dead[id])
				}
			}
			// The page reloads with the new counts.
			waitFor(t, b, `document.querySelector('#index-status[data-ready="true"] strong') !== null && document.querySelector('#index-status strong').textContent === "27"`, "the page shows 27 after the redrive")
			b.noErrors(lb.name + " redrive")
		})
	}
	b.t = t

	// A message: a poison body that was not JSON.
	redis := live[0]
	var poison dlqtest.Item
	for _, it := range redis.seed.Items {
		if it.Wrapped {
			poison = it
			break
		}
	}
	b.run("poison row", chromedp.Navigate(fmt.Sprintf("%s/dlq?%s", srv.URL, q("b", "0", "q", redis.dlq, "reason", "poison"))),
		chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))
	var found bool
	refs := eval[[]string](b, `[...document.querySelectorAll("tr[data-ref]")].map(r => r.dataset.ref)`)
	if len(refs) != redis.seed.Count(func(it dlqtest.Item) bool { return it.Poison }) {
		t.Fatalf("the poison filter shows %d rows", len(refs))
	}
	for _, ref := range refs {
		b.run("message "+ref, chromedp.Navigate(srv.URL+eval[string](b, fmt.Sprintf(`document.querySelector('tr[data-ref=%q] a.open').getAttribute("href")`, ref))),
			chromedp.WaitVisible(chromedp.CSS(`#raw`)))
		if strings.Contains(eval[string](b, `document.querySelector("#raw").textContent`), string(poison.Redriven)) {
			found = true
			break
		}
		b.run("back", chromedp.Navigate(fmt.Sprintf("%s/dlq?%s", srv.URL, q("b", "0", "q", redis.dlq, "reason", "poison"))),
			chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))
	}
	if !found {
		t.Fatalf("no message page shows the poison body %q", poison.Redriven)
	}
	if dl := eval[string](b, `document.querySelector("#dead-letter").textContent`); !strings.Contains(dl, `"reason": "poison"`) {
		t.Errorf("the dead_letter block reads %s", dl)
	}
	if orig := eval[string](b, `document.querySelector("#original").textContent`); orig != string(poison.Redriven) {
		t.Errorf("the original bytes read %q, want %q", orig, poison.Redriven)
	}
	b.screenshot("message")
	b.noErrors("message page")

	// A failed message with its envelope, key and headers (Kafka keeps keys).
	kafka := live[1]
	var keyed dlqtest.Item
	for _, it := range kafka.seed.Items {
		if it.Reason == envelope.ReasonUnknownURN && len(it.Message.Key) > 0 && it.Message.Headers != nil {
			keyed = it
			break
		}
	}
	b.run("search "+keyed.ID, chromedp.Navigate(srv.URL+"/search?"+q("q", keyed.ID)), chromedp.WaitVisible(chromedp.CSS(`#results`)))
	if n := eval[int](b, `document.querySelectorAll("#results tr[data-ref]").length`); n != 1 {
		t.Fatalf("search for %s found %d messages, want 1", keyed.ID, n)
	}
	b.screenshot("search")
	b.run("open the hit", chromedp.Click(chromedp.CSS(`#results a.open`)), chromedp.WaitVisible(chromedp.CSS(`#envelope`)))
	if env := eval[string](b, `document.querySelector("#envelope").textContent`); !strings.Contains(env, keyed.ID) || !strings.Contains(env, dlqtest.URNGhost) {
		t.Errorf("the envelope of %s reads %s", keyed.ID, env)
	}
	if key := eval[string](b, `document.querySelector("#key").textContent`); key != string(keyed.Message.Key) {
		t.Errorf("key %q, want %q", key, keyed.Message.Key)
	}
	if h := eval[string](b, `document.querySelector("table.headers").textContent`); !strings.Contains(h, keyed.Message.Headers["traceparent"]) {
		t.Errorf("headers read %q, want traceparent %s", h, keyed.Message.Headers["traceparent"])
	}
	b.noErrors("search and message")

	// A live tail of the Redis work queue sees a message as it arrives.
	b.run("tail", chromedp.Navigate(fmt.Sprintf("%s/tail?%s", srv.URL, q("b", "0", "q", redis.work))))
	waitFor(t, b, `document.querySelector("#tail-status").textContent.startsWith("Watching")`, "the tail is watching")
	env, err := envelope.Make("urn:babel:orders:created", map[string]any{"order_id": 77})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := env.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := redis.tr.Publish(ctx, &transport.Message{Queue: redis.work, Body: body}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, fmt.Sprintf(`[...document.querySelectorAll("#tail-rows a.open")].some(a => a.textContent === %q)`, env.Meta.ID), "the new message in the tail")
	b.screenshot("tail")
	b.noErrors("tail")

	// An action without the CSRF token is refused (the browser logs the 403).
	b.allow("status of 403")
	status := eval[int](b, `fetch("/api/redrive", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({b: 0, q: "`+redis.dlq+`", all: true, confirm: true})}).then(r => r.status)`)
	if status != 403 {
		t.Errorf("a redrive without the CSRF token answered %d, want 403", status)
	}
	if got := ids(t, redis.tr, redis.dlq); len(got) != 27 {
		t.Errorf("the refused redrive changed the DLQ: %d messages", len(got))
	}

	// The keyboard: j j x selects the second row, r opens the redrive of it, Esc
	// closes the dialog, / goes to the search box.
	dlqURL := fmt.Sprintf("%s/dlq?%s", srv.URL, q("b", "0", "q", redis.dlq))
	b.run("keyboard", chromedp.Navigate(dlqURL), chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)),
		chromedp.KeyEvent("j"), chromedp.KeyEvent("j"), chromedp.KeyEvent("x"))
	second := eval[string](b, `document.querySelectorAll("table.rows tbody tr[data-ref]")[1].dataset.ref`)
	if got := eval[[]string](b, `[...document.querySelectorAll("input.pick:checked")].map(c => c.value)`); len(got) != 1 || got[0] != second {
		t.Errorf("j j x selected %v, want the second row %s", got, second)
	}
	b.run("r", chromedp.KeyEvent("r"), chromedp.WaitVisible(chromedp.CSS(`#rd-summary`)))
	if got := eval[string](b, `document.querySelector("#rd-summary").dataset.moves`); got != "1" {
		t.Errorf("r: the dry run would move %s, want 1", got)
	}
	b.run("Esc and /", chromedp.KeyEvent("\x1b"), chromedp.WaitNotVisible(chromedp.CSS(`#redrive-dialog`)), chromedp.KeyEvent("/"))
	if id := eval[string](b, `document.activeElement.id`); id != "search-box" {
		t.Errorf("/ focused %q, want the search box", id)
	}
	if got := ids(t, redis.tr, redis.dlq); len(got) != 27 {
		t.Errorf("the keyboard's dry run changed the DLQ: %d messages", len(got))
	}
	b.noErrors("keyboard")

	// Dark, and a phone.
	b.run("dark", chromedp.Navigate(dlqURL), chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)),
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("bq-console-theme", "dark")`), chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))
	if theme := eval[string](b, `document.documentElement.dataset.theme || ""`); theme != "dark" {
		t.Errorf("theme %q after choosing dark", theme)
	}
	b.screenshot("dlq-dark")
	b.viewport(390, 844, true)
	b.run("phone", chromedp.Evaluate[chromedp.Void](`localStorage.removeItem("bq-console-theme")`), chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#index-status[data-ready="true"]`)))
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 400 {
		t.Errorf("on a phone the page is %d px wide: it scrolls sideways", w)
	}
	b.screenshot("dlq-phone")
	b.run("laptop", chromedp.EmulateReset())
	b.noErrors("themes")

	// With a token: the login page, then the console.
	tsrv := serve(t, brokers[:1], console.WithToken("s3cret-token"), console.WithoutPrewarm())
	b.run("login page", chromedp.Navigate(tsrv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`form.login`)))
	b.screenshot("login")
	b.run("log in", chromedp.SendKeys(chromedp.CSS(`#user`), "ada"), chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret-token"),
		chromedp.Submit(chromedp.CSS(`form.login`)), chromedp.WaitVisible(chromedp.CSS(`#overview`)))
	if u := eval[string](b, `document.querySelector(".user").textContent`); u != "ada" {
		t.Errorf("logged in as %q, want ada", u)
	}
	b.noErrors("login")
}

// checkGroups compares the group counts the dead-letter page shows with the seed.
func checkGroups(t *testing.T, b *browser, s dlqtest.Seed) {
	t.Helper()
	shown := func(dim string) map[string]int {
		return eval[map[string]int](b, fmt.Sprintf(`Object.fromEntries([...document.querySelectorAll('section.group[data-dim=%q] tr[data-key]')].map(r => [r.dataset.key, Number(r.dataset.count)]))`, dim))
	}
	want := func(key func(dlqtest.Item) string) map[string]int {
		m := map[string]int{}
		for _, it := range s.Items {
			m[key(it)]++
		}
		return m
	}
	for dim, key := range map[string]func(dlqtest.Item) string{
		"reason": func(it dlqtest.Item) string { return it.Reason },
		"urn":    func(it dlqtest.Item) string { return it.URN },
		"lang":   func(it dlqtest.Item) string { return it.Lang },
		"fp":     func(it dlqtest.Item) string { return it.Fingerprint },
		"queue":  func(dlqtest.Item) string { return s.Queue },
	} {
		got, exp := shown(dim), want(key)
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("group %s: the page shows %v, want %v", dim, got, exp)
		}
	}
	if total := eval[string](b, `document.querySelector("#index-status strong").textContent`); total != fmt.Sprint(len(s.Items)) {
		t.Errorf("the page counts %s messages, want %d", total, len(s.Items))
	}
}

// waitFor polls a JavaScript condition until it holds (30 s at most).
func waitFor(t *testing.T, b *browser, cond, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !eval[bool](b, "(() => { try { return !!("+cond+"); } catch (e) { return false; } })()") {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s never held", what, cond)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", to)
}
