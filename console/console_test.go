package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestDLQGroupsAndPages(t *testing.T) {
	srv, _, s := memoryConsole(t, 120)
	c := newClient(t, srv.URL)
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	if !v.Ready || v.Total != 120 || v.Matching != 120 || v.Pages != 3 || len(v.Rows) != 50 {
		t.Fatalf("view: ready %v total %d matching %d pages %d rows %d", v.Ready, v.Total, v.Matching, v.Pages, len(v.Rows))
	}
	for dim, key := range map[string]func(dlqtest.Item) string{
		"reason": func(it dlqtest.Item) string { return it.Reason },
		"urn":    func(it dlqtest.Item) string { return it.URN },
		"lang":   func(it dlqtest.Item) string { return it.Lang },
		"fp":     func(it dlqtest.Item) string { return it.Fingerprint },
	} {
		want := map[string]int{}
		for _, it := range s.Items {
			want[key(it)]++
		}
		if got := v.counts(dim); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", dim, got, want)
		}
	}
	if want := s.Count(func(it dlqtest.Item) bool { return it.Poison }); v.Poison != want {
		t.Errorf("poison %d, want %d", v.Poison, want)
	}
	// The list is in queue order, page after page.
	var seen []string
	for page := 1; page <= 3; page++ {
		var p dlqView
		c.getJSON(fmt.Sprintf("/api/dlq?%s&page=%d", q("b", "0", "q", "orders.dlq"), page), &p)
		for _, r := range p.Rows {
			seen = append(seen, r.ID)
		}
	}
	for i, it := range s.Items {
		if seen[i] != it.ID {
			t.Fatalf("row %d is %q, want %q", i, seen[i], it.ID)
		}
	}
	// A filter narrows the list and its groups.
	var f dlqView
	c.getJSON("/api/dlq?"+q("b", "0", "q", "orders.dlq", "urn", dlqtest.URNPayments, "lang", "php"), &f)
	want := s.Count(func(it dlqtest.Item) bool { return it.URN == dlqtest.URNPayments && it.Lang == "php" })
	if f.Matching != want || f.Total != 120 || f.counts("urn")[dlqtest.URNPayments] != want || len(f.counts("urn")) != 1 {
		t.Errorf("filtered: matching %d (want %d), total %d, urns %v", f.Matching, want, f.Total, f.counts("urn"))
	}
	for _, r := range f.Rows {
		if r.Reason != envelope.ReasonFailed {
			t.Errorf("filtered row %s has reason %s", r.ID, r.Reason)
		}
	}
}

func TestMessageView(t *testing.T) {
	srv, tr, s := memoryConsole(t, 20)
	c := newClient(t, srv.URL)
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	for i, it := range s.Items[:10] {
		var m struct {
			ID         string            `json:"id"`
			Reason     string            `json:"reason"`
			Raw        string            `json:"raw"`
			DeadLetter string            `json:"dead_letter"`
			Original   string            `json:"original"`
			KeyNil     bool              `json:"key_nil"`
			Headers    map[string]string `json:"headers"`
		}
		c.getJSON(strings.Replace(v.Rows[i].URL, "/message", "/api/message", 1), &m)
		if m.ID != it.ID || m.Reason != it.Reason || m.Raw != string(it.Message.Body) || !strings.Contains(m.DeadLetter, `"reason": "`+it.Reason+`"`) {
			t.Errorf("message %d: %+v", i, m)
		}
		if it.Poison && m.Original != string(it.Redriven) {
			t.Errorf("poison %d: original %q, want %q", i, m.Original, it.Redriven)
		}
		if m.KeyNil != (it.Message.Key == nil) || fmt.Sprint(m.Headers) != fmt.Sprint(orEmpty(it.Message.Headers)) {
			t.Errorf("message %d: key nil %v, headers %v; want %v, %v", i, m.KeyNil, m.Headers, it.Message.Key == nil, it.Message.Headers)
		}
	}
	// A message that moved on the queue is still found; one that left it is a 404.
	first := v.Rows[0]
	ctx := context.Background()
	c2, err := tr.Consume(ctx, "orders.dlq", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c2.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if resp, _ := c.get(first.URL); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a message no longer on the queue: %d", resp.StatusCode)
	}
	if resp, body := c.get(v.Rows[5].URL); resp.StatusCode != http.StatusOK || !strings.Contains(body, v.Rows[5].ID) {
		t.Errorf("a message one place further up: %d", resp.StatusCode)
	}
	// Bad input is a clear error.
	for path, status := range map[string]int{
		"/message?b=0&q=orders.dlq":                            http.StatusBadRequest,
		"/message?b=7&q=orders.dlq&ref=x":                      http.StatusNotFound,
		"/message?b=0&q=elsewhere&ref=x":                       http.StatusNotFound,
		"/message?b=0&q=orders.dlq&ref=nope&pos=2&at=notanint": http.StatusNotFound,
		"/dlq?b=x&q=orders.dlq":                                http.StatusNotFound,
	} {
		if resp, body := c.get(path); resp.StatusCode != status {
			t.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, body, status)
		}
	}
}

func orEmpty(h map[string]string) map[string]string {
	if h == nil {
		return map[string]string{}
	}
	return h
}

func TestRedriveAPI(t *testing.T) {
	srv, tr, s := memoryConsole(t, 40)
	c := newClient(t, srv.URL)
	token := c.csrf()
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	var refs []string
	var picked []string
	for _, r := range v.Rows {
		if r.Reason == envelope.ReasonUnknownURN && len(refs) < 4 {
			refs, picked = append(refs, r.Ref), append(picked, r.ID)
		}
	}
	body := map[string]any{"b": 0, "q": "orders.dlq", "refs": refs, "dry_run": true}

	resp, out := c.postJSON("/api/redrive", token, body)
	if resp.StatusCode != http.StatusOK || out["result"].(map[string]any)["moved"].(float64) != 4 {
		t.Fatalf("dry run: %d %v", resp.StatusCode, out)
	}
	if n := len(tr.Messages("orders.dlq")); n != 40 || len(tr.Messages("orders")) != 0 {
		t.Fatalf("the dry run moved messages: DLQ %d, orders %d", n, len(tr.Messages("orders")))
	}

	body["dry_run"] = false
	if resp, out := c.postJSON("/api/redrive", token, body); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a redrive without confirm: %d %v", resp.StatusCode, out)
	}
	body["confirm"] = true
	body["bypass"] = true
	resp, out = c.postJSON("/api/redrive", token, body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("redrive: %d %v", resp.StatusCode, out)
	}
	job := waitJob(t, c, out["job"].(string))
	if job["moved"].(float64) != 4 || job["user"] != "local" || job["error"] != nil {
		t.Fatalf("job %v", job)
	}
	moved := ids(t, tr, "orders")
	if len(moved) != 4 {
		t.Fatalf("orders holds %d", len(moved))
	}
	for _, id := range picked {
		if !moved[id] {
			t.Errorf("%s was not moved", id)
		}
	}
	for _, m := range tr.Messages("orders") {
		if m.Headers["bq-replay-bypass"] != "1" {
			t.Errorf("a redriven message lacks the bypass header: %v", m.Headers)
		}
	}
	if n := len(tr.Messages("orders.dlq")); n != 36 {
		t.Errorf("the DLQ holds %d, want 36", n)
	}
	// The page shows the queue as it is once the job is done.
	c.getJSON("/api/dlq?"+q("b", "0", "q", "orders.dlq"), &v)
	if v.Total != 36 {
		t.Errorf("the page counts %d after the redrive", v.Total)
	}

	// Every message of a filter, to a chosen queue.
	resp, out = c.postJSON("/api/redrive", token, map[string]any{"b": 0, "q": "orders.dlq", "all": true,
		"filter": map[string]string{"lang": "python", "reason": "failed"}, "target": "payments", "confirm": true})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("filter redrive: %d %v", resp.StatusCode, out)
	}
	job = waitJob(t, c, out["job"].(string))
	want := s.Count(func(it dlqtest.Item) bool { return it.Lang == "python" && it.Reason == "failed" })
	if int(job["moved"].(float64)) != want || len(tr.Messages("payments")) != want {
		t.Errorf("filter redrive moved %v (payments holds %d), want %d", job["moved"], len(tr.Messages("payments")), want)
	}

	// Refused: bad requests, a queue that is not a DLQ, a target the console does
	// not know.
	for _, bad := range []map[string]any{
		{"b": 0, "q": "orders", "all": true, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "dry_run": true, "target": "elsewhere"},
		{"b": 0, "q": "orders.dlq", "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "refs": []string{"x"}, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "filter": map[string]string{"colour": "red"}, "dry_run": true},
		{"b": 3, "q": "orders.dlq", "all": true, "dry_run": true},
		{"b": 0, "q": "orders.dlq", "all": true, "dry_run": true, "extra": 1},
	} {
		if resp, out := c.postJSON("/api/redrive", token, bad); resp.StatusCode/100 != 4 || out["error"] == "" {
			t.Errorf("%v: %d %v", bad, resp.StatusCode, out)
		}
	}
	if n := len(tr.Messages("orders.dlq")); n != 36-want {
		t.Errorf("refused requests changed the DLQ: %d", n)
	}
}

func waitJob(t *testing.T, c *client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var j map[string]any
		c.getJSON("/api/jobs/"+id, &j)
		if j["done"] == true {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not done: %v", id, j)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestActionsRefused: without the session's CSRF token, from another origin, in
// read-only mode, or (with a token) before the login, an action changes nothing.
func TestActionsRefused(t *testing.T) {
	redrive := map[string]any{"b": 0, "q": "orders.dlq", "all": true, "confirm": true}
	t.Run("csrf", func(t *testing.T) {
		srv, tr, _ := memoryConsole(t, 10)
		c := newClient(t, srv.URL)
		token := c.csrf()
		for _, tok := range []string{"", "wrong", token + "x"} {
			if resp, out := c.postJSON("/api/redrive", tok, redrive); resp.StatusCode != http.StatusForbidden {
				t.Errorf("token %q: %d %v", tok, resp.StatusCode, out)
			}
		}
		// Another browser's token is not this session's.
		other := newClient(t, srv.URL).csrf()
		if resp, _ := c.postJSON("/api/redrive", other, redrive); resp.StatusCode != http.StatusForbidden {
			t.Errorf("another session's token: %d", resp.StatusCode)
		}
		// A form post from another site, even with the token.
		b, _ := json.Marshal(redrive)
		resp, _ := c.do("POST", "/api/redrive", strings.NewReader(string(b)), map[string]string{
			"Content-Type": "application/json", "X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site: %d", resp.StatusCode)
		}
		if n := len(tr.Messages("orders.dlq")); n != 10 {
			t.Errorf("refused actions moved messages: %d left", n)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		srv, tr, _ := memoryConsole(t, 10, console.WithReadOnly())
		c := newClient(t, srv.URL)
		token := c.csrf()
		for _, body := range []map[string]any{redrive, {"b": 0, "q": "orders.dlq", "all": true, "dry_run": true}} {
			if resp, out := c.postJSON("/api/redrive", token, body); resp.StatusCode != http.StatusForbidden {
				t.Errorf("read-only: %d %v", resp.StatusCode, out)
			}
		}
		_, page := c.get("/dlq?b=0&q=orders.dlq")
		if strings.Contains(page, "redrive-selected") || strings.Contains(page, "redrive-dialog") || !strings.Contains(page, "read-only") {
			t.Errorf("the read-only page offers a redrive")
		}
		if n := len(tr.Messages("orders.dlq")); n != 10 {
			t.Errorf("read-only moved messages: %d left", n)
		}
	})
	t.Run("token", func(t *testing.T) {
		var logs transporttest.LogBuffer
		srv, tr, _ := memoryConsole(t, 10, console.WithToken("open-sesame"), console.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		c := newClient(t, srv.URL)
		if resp, _ := c.get("/dlq?b=0&q=orders.dlq"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
			t.Errorf("a page before login: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		for _, path := range []string{"/api/overview", "/api/dlq?b=0&q=orders.dlq", "/api/tail?b=0&q=orders"} {
			if resp, _ := c.get(path); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s before login: %d", path, resp.StatusCode)
			}
		}
		_, page := c.get("/login")
		token := csrfRE.FindStringSubmatch(page)[1]
		if resp, _ := c.postJSON("/api/redrive", token, redrive); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an action before login: %d", resp.StatusCode)
		}
		login := func(tok, user, tokenValue string) *http.Response {
			form := url.Values{"csrf": {tok}, "user": {user}, "token": {tokenValue}, "next": {"/dlq?b=0&q=orders.dlq"}}
			resp, _ := c.do("POST", "/login", strings.NewReader(form.Encode()), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
			return resp
		}
		if resp := login("", "mallory", "open-sesame"); resp.StatusCode != http.StatusForbidden {
			t.Errorf("a login without the CSRF token: %d", resp.StatusCode)
		}
		if resp := login(token, "mallory", "guess"); resp.StatusCode != http.StatusOK {
			t.Errorf("a wrong token: %d", resp.StatusCode)
		}
		if resp, _ := c.get("/api/overview"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("after a wrong token: %d", resp.StatusCode)
		}
		resp := login(token, "ada", "open-sesame")
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dlq?b=0&q=orders.dlq" {
			t.Fatalf("login: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		// The session before the login is not the one after it.
		if resp, _ := c.postJSON("/api/redrive", token, redrive); resp.StatusCode != http.StatusForbidden {
			t.Errorf("the pre-login CSRF token after login: %d", resp.StatusCode)
		}
		fresh := c.csrf()
		resp2, out := c.postJSON("/api/redrive", fresh, redrive)
		if resp2.StatusCode != http.StatusAccepted {
			t.Fatalf("a redrive after login: %d %v", resp2.StatusCode, out)
		}
		if j := waitJob(t, c, out["job"].(string)); j["user"] != "ada" {
			t.Errorf("the job was made by %v, want ada", j["user"])
		}
		// The audit log says who moved what; the token is in no line.
		audit := regexp.MustCompile(`msg="console: redrive" user=ada remote=127\.0\.0\.1:\d+ broker=memory:\S* dlq=orders\.dlq .*moved=\d+`)
		if !audit.MatchString(logs.String()) || !strings.Contains(logs.String(), `msg="console: login refused" user=mallory`) ||
			strings.Contains(logs.String(), "open-sesame") {
			t.Errorf("audit log:\n%s", logs.String())
		}
		if len(tr.Messages("orders.dlq")) == 10 {
			t.Errorf("the redrive after login moved nothing")
		}
		// Log out: the session is gone.
		form := url.Values{"csrf": {fresh}}
		c.do("POST", "/logout", strings.NewReader(form.Encode()), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		if resp, _ := c.get("/api/overview"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("after logout: %d", resp.StatusCode)
		}
	})
	t.Run("basic", func(t *testing.T) {
		srv, _, _ := memoryConsole(t, 10, console.WithBasicAuth("ops", "pa55"))
		c := newClient(t, srv.URL)
		resp, _ := c.get("/")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("no credentials: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		bad := newClient(t, strings.Replace(srv.URL, "http://", "http://ops:nope@", 1))
		if resp, _ := bad.get("/"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a wrong password: %d", resp.StatusCode)
		}
		good := newClient(t, strings.Replace(srv.URL, "http://", "http://ops:pa55@", 1))
		if resp, body := good.get("/"); resp.StatusCode != http.StatusOK || !strings.Contains(body, ">ops<") {
			t.Errorf("the right password: %d", resp.StatusCode)
		}
	})
}

// TestLoopbackOnlyWithoutLogin: a console without a login answers only loopback
// clients asking for a loopback name, and will not listen beyond loopback.
func TestLoopbackOnlyWithoutLogin(t *testing.T) {
	tr := memory.New()
	c, err := console.New([]console.Broker{{Transport: tr, Queues: []console.Queue{{Name: "orders"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		remote, host string
		status       int
	}{
		{"127.0.0.1:5000", "127.0.0.1:8080", http.StatusOK},
		{"[::1]:5000", "localhost:8080", http.StatusOK},
		{"10.1.2.3:5000", "127.0.0.1:8080", http.StatusForbidden},
		{"127.0.0.1:5000", "attacker.example:8080", http.StatusForbidden}, // DNS rebinding
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr, r.Host = tc.remote, tc.host
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("from %s to %s: %d, want %d", tc.remote, tc.host, w.Code, tc.status)
		}
	}
	for _, addr := range []string{":8080", "0.0.0.0:8080", "192.168.1.10:8080", "[::]:8080"} {
		if err := c.ListenAndServe(context.Background(), addr, nil); !errors.Is(err, console.ErrAuthRequired) {
			t.Errorf("ListenAndServe(%s) without a login: %v", addr, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:80": true, "[::1]:1": true, ":8080": false, "0.0.0.0:1": false, "example.com:80": false} {
		if console.IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%s) = %v", addr, !want)
		}
	}
	// With a login, any address; it serves until ctx ends.
	tc, err := console.New([]console.Broker{{Transport: tr, Queues: []console.Queue{{Name: "orders"}}}}, console.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- tc.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	addr := <-addrc
	resp, err := http.Get("http://" + addr.String() + "/login")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /login: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("ListenAndServe after ctx ended: %v", err)
	}
	_ = tc.Close()
}

// TestNoPasswordReachesTheBrowser: the broker URL's password and secret
// parameters are redacted on every page and in every answer.
func TestNoPasswordReachesTheBrowser(t *testing.T) {
	tr := memory.New()
	dead := dlqtest.Mixed("orders", "orders.dlq", 5, seedTime)
	for _, m := range dead.Messages() {
		_ = tr.Publish(context.Background(), m)
	}
	srv := serve(t, []console.Broker{{URL: "memory://user:hunter2@host/?secret_key=k3y", Transport: tr, Queues: []console.Queue{{Name: "orders"}}}})
	cl := newClient(t, srv.URL)
	var v dlqView
	cl.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	for _, path := range []string{"/", "/api/overview", "/dlq?b=0&q=orders.dlq", "/api/dlq?b=0&q=orders.dlq", v.Rows[0].URL, "/search?q=" + v.Rows[0].ID, "/tail?b=0&q=orders"} {
		_, body := cl.get(path)
		if strings.Contains(body, "hunter2") || strings.Contains(body, "k3y") {
			t.Errorf("%s shows a secret", path)
		}
	}
	_, body := cl.get("/")
	if !strings.Contains(body, "user:xxxxx@host") {
		t.Errorf("the overview does not name the broker by its redacted URL")
	}
}

func TestSearchAndTail(t *testing.T) {
	srv, tr, s := memoryConsole(t, 30)
	c := newClient(t, srv.URL)
	// A live message on the work queue and a dead letter share a trace.
	trace := ""
	for _, it := range s.Items {
		if !it.Poison {
			env, err := envelope.Decode(it.Message.Body)
			if err != nil {
				t.Fatal(err)
			}
			trace = env.TraceID
			break
		}
	}
	env, err := envelope.Make("urn:babel:orders:created", map[string]int{"n": 1}, envelope.WithTraceID(trace))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := env.Encode()
	if err := tr.Publish(context.Background(), &transport.Message{Queue: "orders", Body: b}); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Hits []struct {
			ID    string `json:"id"`
			Queue string `json:"queue"`
			Match string `json:"match"`
			DLQ   bool   `json:"dlq"`
		} `json:"hits"`
	}
	c.getJSON("/api/search?"+q("q", trace), &res)
	got := map[string]string{}
	for _, h := range res.Hits {
		got[h.Queue] = h.ID + " " + h.Match
	}
	if len(res.Hits) != 2 || got["orders"] != env.Meta.ID+" trace_id" || !strings.HasSuffix(got["orders.dlq"], " trace_id") {
		t.Errorf("search by trace: %v", got)
	}
	c.getJSON("/api/search?"+q("q", s.Items[3].ID), &res)
	if len(res.Hits) != 1 || res.Hits[0].ID != s.Items[3].ID || res.Hits[0].Match != "id" || !res.Hits[0].DLQ {
		t.Errorf("search by id: %+v", res.Hits)
	}

	// The tail shows what waits, then what arrives.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/tail?b=0&q=orders", nil)
	for _, ck := range c.hc.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("tail content type %q", ct)
	}
	events := readEvents(resp)
	next := func(kind string) map[string]any {
		t.Helper()
		for ev := range events {
			if ev.kind == kind {
				return ev.data
			}
		}
		t.Fatalf("the tail ended before a %s event", kind)
		return nil
	}
	if m := next("message"); m["id"] != env.Meta.ID || m["backlog"] != true {
		t.Errorf("first tail event %v", m)
	}
	next("status")
	later, _ := envelope.Make("urn:babel:orders:created", map[string]int{"n": 2})
	lb, _ := later.Encode()
	if err := tr.Publish(context.Background(), &transport.Message{Queue: "orders", Body: lb}); err != nil {
		t.Fatal(err)
	}
	if m := next("message"); m["id"] != later.Meta.ID || m["backlog"] != nil {
		t.Errorf("tail event after a publish %v", m)
	}
}

type sse struct {
	kind string
	data map[string]any
}

func readEvents(resp *http.Response) <-chan sse {
	out := make(chan sse)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
			case line == "":
				out <- ev
				ev = sse{}
			}
		}
	}()
	return out
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	tr := memory.New()
	qs := []console.Queue{{Name: "orders"}}
	for name, tc := range map[string]struct {
		brokers []console.Broker
		opts    []console.Option
	}{
		"no broker":      {nil, nil},
		"no transport":   {[]console.Broker{{Queues: qs}}, nil},
		"no queue":       {[]console.Broker{{Transport: tr}}, nil},
		"empty name":     {[]console.Broker{{Transport: tr, Queues: []console.Queue{{}}}}, nil},
		"own DLQ":        {[]console.Broker{{Transport: tr, Queues: []console.Queue{{Name: "a", DLQ: "a"}}}}, nil},
		"token and user": {[]console.Broker{{Transport: tr, Queues: qs}}, []console.Option{console.WithToken("t"), console.WithBasicAuth("u", "p")}},
		"user only":      {[]console.Broker{{Transport: tr, Queues: qs}}, []console.Option{console.WithBasicAuth("u", "")}},
		"colon user":     {[]console.Broker{{Transport: tr, Queues: qs}}, []console.Option{console.WithBasicAuth("a:b", "p")}},
	} {
		if c, err := console.New(tc.brokers, tc.opts...); err == nil {
			_ = c.Close()
			t.Errorf("%s: no error", name)
		}
	}
}

// TestIndexFollowsTheQueue: the page reads a dead-letter queue again once its index
// is stale and the broker's count moved, not while the queue stays as it was.
func TestIndexFollowsTheQueue(t *testing.T) {
	srv, tr, s := memoryConsole(t, 10, console.WithStaleAfter(100*time.Millisecond), console.WithSampleInterval(20*time.Millisecond))
	c := newClient(t, srv.URL)
	status := func() (version float64, total float64) {
		var st map[string]any
		c.getJSON("/api/dlq?status=1&"+q("b", "0", "q", "orders.dlq"), &st)
		v, _ := st["version"].(float64)
		n, _ := st["total"].(float64)
		return v, n
	}
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+q("b", "0", "q", "orders.dlq"), &v)
	first, _ := status()
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		if now, _ := status(); now != first {
			t.Fatalf("the index was read again (version %v → %v) while the queue did not change", first, now)
		}
	}
	more := dlqtest.Mixed("orders", "orders.dlq", 3, seedTime)
	for _, m := range more.Messages() {
		if err := tr.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if version, total := status(); version > first && int(total) == len(s.Items)+3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index did not follow the queue: %v", fmt.Sprint(status()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
