package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// bodiesOn counts the bodies on a memory queue.
func bodiesOn(tr *memory.Transport, q string) map[string]int {
	out := map[string]int{}
	for _, m := range tr.Messages(q) {
		out[string(m.Body)]++
	}
	return out
}

// TestDeleteAPI: a deletion's dry run removes nothing and counts by reason and URN; a
// deletion must be confirmed; confirmed, it removes exactly the messages picked, or at
// most the confirmed count of a filter, and the audit log says who.
func TestDeleteAPI(t *testing.T) {
	var logs transporttest.LogBuffer
	srv, tr, s := memoryConsole(t, 40, console.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	c := newClient(t, srv.URL)
	token := c.csrf()
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	var refs, picked []string
	for _, r := range v.Rows {
		if r.Reason == envelope.ReasonUnknownURN && len(refs) < 4 {
			refs, picked = append(refs, r.Ref), append(picked, r.ID)
		}
	}
	before := bodiesOn(tr, "orders.dlq")
	body := map[string]any{"b": 0, "q": "orders.dlq", "refs": refs, "dry_run": true}
	resp, out := c.postJSON("/api/delete", token, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dry run: %d %v", resp.StatusCode, out)
	}
	res := out["result"].(map[string]any)
	if res["removed"].(float64) != 4 || len(out["items"].([]any)) != 4 {
		t.Fatalf("dry run: %v", out)
	}
	reasons := res["selected"].(map[string]any)["reasons"].([]any)
	if len(reasons) != 1 || reasons[0].(map[string]any)["key"] != "unknown_urn" || reasons[0].(map[string]any)["count"].(float64) != 4 {
		t.Errorf("dry run by reason: %v", reasons)
	}
	if fmt.Sprint(bodiesOn(tr, "orders.dlq")) != fmt.Sprint(before) {
		t.Fatalf("a dry run changed the queue")
	}
	body["dry_run"] = false
	if resp, out := c.postJSON("/api/delete", token, body); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a deletion without confirm: %d %v", resp.StatusCode, out)
	}
	body["confirm"] = true
	resp, out = c.postJSON("/api/delete", token, body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete: %d %v", resp.StatusCode, out)
	}
	job := waitJob(t, c, out["job"].(string))
	if job["kind"] != "delete" || job["moved"].(float64) != 4 || job["user"] != "local" || job["error"] != nil {
		t.Fatalf("job %v", job)
	}
	left := ids(t, tr, "orders.dlq")
	if len(left) != 36 {
		t.Fatalf("the DLQ holds %d, want 36", len(left))
	}
	for _, id := range picked {
		if left[id] {
			t.Errorf("%s was not deleted", id)
		}
	}
	for b, n := range bodiesOn(tr, "orders.dlq") {
		if before[b] != n {
			t.Errorf("a message left is not one that was there: %.80s", b)
		}
	}
	if len(tr.Messages("orders")) != 0 {
		t.Errorf("a deletion wrote to the work queue")
	}
	c.getJSON("/api/dlq?"+q("b", "0", "q", "orders.dlq"), &v)
	if v.Total != 36 {
		t.Errorf("the page counts %d after the deletion", v.Total)
	}

	// A filter, bounded by the confirmed count.
	poison := s.Count(func(it dlqtest.Item) bool { return it.Poison })
	resp, out = c.postJSON("/api/delete", token, map[string]any{"b": 0, "q": "orders.dlq", "all": true,
		"filter": map[string]string{"reason": "poison"}, "confirm": true, "max": 2})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("filter delete: %d %v", resp.StatusCode, out)
	}
	if job := waitJob(t, c, out["job"].(string)); job["moved"].(float64) != 2 {
		t.Fatalf("filter delete with max 2: %v", job)
	}
	c.getJSON("/api/dlq?"+q("b", "0", "q", "orders.dlq", "reason", "poison"), &v)
	if v.Matching != poison-2 || v.Total != 34 {
		t.Errorf("after deleting 2 of %d poison: %d poison, %d in all", poison, v.Matching, v.Total)
	}

	audit := regexp.MustCompile(`msg="console: delete" user=local remote=127\.0\.0\.1:\d+ broker=memory:\S* dlq=orders\.dlq selected=4 job=\S+ removed=4 `)
	if !audit.MatchString(logs.String()) {
		t.Errorf("the audit log does not say who deleted what:\n%s", logs.String())
	}

	// Refused: bad requests.
	for _, bad := range []map[string]any{
		{"b": 0, "q": "orders", "all": true, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "refs": []string{"x"}, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "filter": map[string]string{"colour": "red"}, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "max": -1, "confirm": true},
		{"b": 5, "q": "orders.dlq", "all": true, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "dry_run": true, "target": "orders"},
	} {
		if resp, out := c.postJSON("/api/delete", token, bad); resp.StatusCode/100 != 4 || out["error"] == "" {
			t.Errorf("%v: %d %v", bad, resp.StatusCode, out)
		}
	}
	if n := len(tr.Messages("orders.dlq")); n != 34 {
		t.Errorf("refused requests changed the DLQ: %d", n)
	}
}

// postForm posts a form with the CSRF token and returns the answer.
func (c *client) postForm(path, token string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	if token != "" {
		form.Set("csrf", token)
	}
	return c.do("POST", path, strings.NewReader(form.Encode()), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
}

// records reads an export into bodies.
func records(t *testing.T, data string) map[string]int {
	t.Helper()
	out := map[string]int{}
	r := dlq.NewReader(strings.NewReader(data))
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("export: %v\n%s", err, data)
		}
		b, _, err := rec.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		out[string(b)]++
	}
}

// TestExportAPI: the export of a selection or of a filter downloads exactly those
// messages, byte for byte, and leaves them on the queue.
func TestExportAPI(t *testing.T) {
	var logs transporttest.LogBuffer
	srv, tr, s := memoryConsole(t, 30, console.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	c := newClient(t, srv.URL)
	token := c.csrf()
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	refs := []string{v.Rows[0].Ref, v.Rows[5].Ref, v.Rows[9].Ref}
	want := map[string]int{}
	for _, i := range []int{0, 5, 9} {
		want[string(s.Items[i].Message.Body)]++
	}
	resp, body := c.postForm("/api/export", token, url.Values{"b": {"0"}, "q": {"orders.dlq"}, "refs": {strings.Join(refs, ",")}})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), `attachment; filename="orders.dlq-`) {
		t.Fatalf("export: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if got := records(t, body); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the export of three picked messages holds %v", got)
	}
	resp, body = c.postForm("/api/export", token, url.Values{"b": {"0"}, "q": {"orders.dlq"}, "all": {"1"}, "filter": {`{"reason":"poison"}`}})
	wantPoison := map[string]int{}
	for _, it := range s.Items {
		if it.Poison {
			wantPoison[string(it.Message.Body)]++
		}
	}
	if got := records(t, body); resp.StatusCode != http.StatusOK || fmt.Sprint(got) != fmt.Sprint(wantPoison) {
		t.Errorf("the export of the poison filter: %d, %d records, want %d", resp.StatusCode, len(got), len(wantPoison))
	}
	if n := len(tr.Messages("orders.dlq")); n != 30 {
		t.Errorf("an export changed the queue: %d", n)
	}
	if !regexp.MustCompile(`msg="console: export" user=local remote=\S+ broker=memory:\S* dlq=orders\.dlq selected=3 exported=3 `).MatchString(logs.String()) {
		t.Errorf("the audit log does not say who exported what:\n%s", logs.String())
	}
	// Without the CSRF token, or a bad request: refused.
	if resp, _ := c.postForm("/api/export", "", url.Values{"b": {"0"}, "q": {"orders.dlq"}, "all": {"1"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an export without the CSRF token: %d", resp.StatusCode)
	}
	for _, bad := range []url.Values{
		{"b": {"0"}, "q": {"orders"}, "all": {"1"}},
		{"b": {"x"}, "q": {"orders.dlq"}, "all": {"1"}},
		{"b": {"0"}, "q": {"orders.dlq"}},
		{"b": {"0"}, "q": {"orders.dlq"}, "all": {"1"}, "filter": {"{"}},
	} {
		if resp, body := c.postForm("/api/export", token, bad); resp.StatusCode/100 != 4 || !strings.Contains(body, "error") {
			t.Errorf("%v: %d %s", bad, resp.StatusCode, body)
		}
	}
}

// TestDeleteAndExportReadOnly: a read-only console offers neither and refuses both.
func TestDeleteAndExportReadOnly(t *testing.T) {
	srv, tr, _ := memoryConsole(t, 10, console.WithReadOnly())
	c := newClient(t, srv.URL)
	token := c.csrf()
	for _, body := range []map[string]any{{"b": 0, "q": "orders.dlq", "all": true, "confirm": true}, {"b": 0, "q": "orders.dlq", "all": true, "dry_run": true}} {
		if resp, out := c.postJSON("/api/delete", token, body); resp.StatusCode != http.StatusForbidden {
			t.Errorf("read-only delete: %d %v", resp.StatusCode, out)
		}
	}
	if resp, _ := c.postForm("/api/export", token, url.Values{"b": {"0"}, "q": {"orders.dlq"}, "all": {"1"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("read-only export: %d", resp.StatusCode)
	}
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v) // the page shows its list once the queue was read
	_, page := c.get("/dlq?b=0&q=orders.dlq")
	if !strings.Contains(page, `id="selection"`) {
		t.Fatalf("the read-only page shows no list")
	}
	for _, id := range []string{"delete-selected", "delete-all", "export-selected", "export-all", "delete-dialog", "export-form", "dlqops.js"} {
		if strings.Contains(page, id) {
			t.Errorf("the read-only page offers %s", id)
		}
	}
	if n := len(tr.Messages("orders.dlq")); n != 10 {
		t.Errorf("read-only deleted messages: %d left", n)
	}
	// Not read-only: the page offers both.
	srv2, _, _ := memoryConsole(t, 10)
	c2 := newClient(t, srv2.URL)
	c2.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	_, page = c2.get("/dlq?b=0&q=orders.dlq")
	for _, id := range []string{"delete-selected", "delete-all", "export-selected", "export-all", "delete-dialog", "export-form", "dlqops.js"} {
		if !strings.Contains(page, id) {
			t.Errorf("the page does not offer %s", id)
		}
	}
}

// groupLog is a memory transport that says its queues are a consumer group's log, as
// the Kafka transport does.
type groupLog struct{ *memory.Transport }

func (groupLog) Group() string { return "console-group" }

// TestDeleteOnALog: on a broker that cannot delete records, the dry run says what
// happens instead, and a deletion acts only when the request allows it.
func TestDeleteOnALog(t *testing.T) {
	mem := memory.New()
	s := dlqtest.Mixed("orders", "orders.dlq", 20, seedTime)
	for _, m := range s.Messages() {
		if err := mem.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	srv := serve(t, []console.Broker{{URL: "memory://", Transport: groupLog{mem}, Queues: []console.Queue{{Name: "orders"}}}})
	c := newClient(t, srv.URL)
	token := c.csrf()
	req := map[string]any{"b": 0, "q": "orders.dlq", "all": true, "filter": map[string]string{"reason": "poison"}, "dry_run": true}
	resp, out := c.postJSON("/api/delete", token, req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(fmt.Sprint(out["note"]), `consumer group "console-group"`) {
		t.Fatalf("dry run on a log: %d %v", resp.StatusCode, out)
	}
	req["dry_run"], req["confirm"] = false, true
	resp, out = c.postJSON("/api/delete", token, req)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete: %d %v", resp.StatusCode, out)
	}
	if job := waitJob(t, c, out["job"].(string)); !strings.Contains(fmt.Sprint(job["error"]), "nothing was removed") || job["moved"].(float64) != 0 {
		t.Fatalf("a deletion on a log without commit_past: %v", job)
	}
	if n := len(mem.Messages("orders.dlq")); n != 20 {
		t.Fatalf("a refused deletion changed the queue: %d", n)
	}
	req["commit_past"] = true
	_, out = c.postJSON("/api/delete", token, req)
	poison := s.Count(func(it dlqtest.Item) bool { return it.Poison })
	if job := waitJob(t, c, out["job"].(string)); job["moved"].(float64) != float64(poison) || job["error"] != nil {
		t.Fatalf("a deletion past the group: %v", job)
	}
	if n := len(mem.Messages("orders.dlq")); n != 20-poison {
		t.Errorf("the queue holds %d, want %d", n, 20-poison)
	}
}
