package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// consoleSession is a browser-like client of a running console: cookies, the CSRF
// token of its session.
type consoleSession struct {
	t     *testing.T
	base  string
	hc    *http.Client
	token string
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]*)">`)

func newConsoleSession(t *testing.T, base string) *consoleSession {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	s := &consoleSession{t: t, base: strings.TrimRight(base, "/"), hc: &http.Client{Jar: jar, Timeout: 3 * time.Minute}}
	_, body := s.do("GET", "/", "", nil)
	m := csrfMeta.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the console's page:\n%.500s", body)
	}
	s.token = m[1]
	return s
}

func (s *consoleSession) do(method, path, ctype string, body io.Reader) (*http.Response, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if s.token != "" && method == "POST" && ctype == "application/json" {
		req.Header.Set("X-CSRF-Token", s.token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (s *consoleSession) post(path string, v any, out any) int {
	s.t.Helper()
	b, _ := json.Marshal(v)
	resp, body := s.do("POST", path, "application/json", bytes.NewReader(b))
	if out != nil {
		if err := json.Unmarshal([]byte(body), out); err != nil {
			s.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
	return resp.StatusCode
}

func (s *consoleSession) get(path string, out any) {
	s.t.Helper()
	resp, body := s.do("GET", path, "", nil)
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), out) != nil {
		s.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
}

// startConsole runs the babelqueue console command on a free loopback port and
// returns its address.
func startConsole(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"console", "-listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		re := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(60 * time.Second):
		t.Fatal("the console did not say where it listens in 60s")
		return ""
	}
}

// TestConsoleDeleteExportOnBrokers runs the console command on every broker of the
// operating commands and, through the API its pages call, exports a filter of a mixed
// dead-letter queue (the download holds exactly its messages, byte for byte), deletes
// it after a dry run (exactly those gone, the rest as they were), and imports the
// download back with the library (the queue as it was). The Chromium test of package
// console drives the same buttons on Redis, Kafka and RabbitMQ.
func TestConsoleDeleteExportOnBrokers(t *testing.T) {
	binary(t)
	awsTestCredentials(t)
	for _, b := range opsBrokers() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			raw := b.url(t)
			q := transporttest.UniqueName("bqcons")
			dq := b.dlq(q)
			if b.prepare != nil {
				b.prepare(t, raw, q, dq)
			}
			tr := openT(t, raw)
			ms := dlqtest.Mixed(q, dq, 120, time.Now()).Messages()
			if !b.keys {
				for _, m := range ms {
					m.Key = nil
				}
			}
			seed(t, tr, ms)
			baseline := browse(t, tr, dq)
			before := multiset(baseline, nil)
			isUnknown := func(e *dlq.Entry) bool { return e.Reason() == "unknown_urn" }
			selected := multiset(baseline, isUnknown)
			rest := multiset(baseline, func(e *dlq.Entry) bool { return !isUnknown(e) })
			want := total(selected)

			s := newConsoleSession(t, startConsole(t, raw+"#"+q))
			var page struct {
				Ready bool `json:"ready"`
				Total int  `json:"total"`
			}
			s.get("/api/dlq?wait=1&"+url.Values{"b": {"0"}, "q": {dq}}.Encode(), &page)
			if !page.Ready || page.Total != len(baseline) {
				t.Fatalf("the console reads %d messages on %s, want %d", page.Total, dq, len(baseline))
			}

			// Export the filter: the download.
			form := url.Values{"csrf": {s.token}, "b": {"0"}, "q": {dq}, "all": {"1"}, "filter": {`{"reason":"unknown_urn"}`}}
			resp, download := s.do("POST", "/api/export", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment;") {
				t.Fatalf("export: %d %v %.300s", resp.StatusCode, resp.Header, download)
			}
			if got := recordsOf(t, []byte(download)); !same(got, selected) {
				t.Fatalf("the console's export: %s", diff(got, selected))
			}

			// Delete it: a dry run, then the confirmed count.
			req := map[string]any{"b": 0, "q": dq, "all": true, "filter": map[string]string{"reason": "unknown_urn"}, "dry_run": true}
			var dry struct {
				Result dlq.PurgeResult `json:"result"`
				Note   string          `json:"note"`
			}
			if code := s.post("/api/delete", req, &dry); code != http.StatusOK || dry.Result.Removed != want {
				t.Fatalf("dry run: %d %+v, want %d", code, dry.Result, want)
			}
			if (b.name == "kafka") != (dry.Note != "") {
				t.Errorf("the dry run's note on %s: %q", b.name, dry.Note)
			}
			if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
				t.Fatalf("the dry run changed the queue: %s", diff(got, before))
			}
			req["dry_run"], req["confirm"], req["max"], req["commit_past"] = false, true, want, dry.Result.Group != ""
			var started struct {
				Job string `json:"job"`
			}
			if code := s.post("/api/delete", req, &started); code != http.StatusAccepted {
				t.Fatalf("delete: %d", code)
			}
			var job map[string]any
			deadline := time.Now().Add(3 * time.Minute)
			for {
				s.get("/api/jobs/"+started.Job, &job)
				if job["done"] == true {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the deletion did not end: %v", job)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if job["error"] != nil || job["moved"].(float64) != float64(want) {
				t.Fatalf("the deletion: %v, want %d removed", job, want)
			}
			if got := multiset(browse(t, tr, dq), nil); !same(got, rest) {
				t.Fatalf("after the console's deletion, the DLQ: %s", diff(got, rest))
			}

			// The download, imported back.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if res, err := dlq.Import(ctx, tr, dlq.NewReader(strings.NewReader(download))); err != nil || res.Imported != want {
				t.Fatalf("import of the console's export: %+v %v", res, err)
			}
			if got := multiset(browse(t, tr, dq), nil); !same(got, before) {
				t.Fatalf("after the console's export, deletion and import, the DLQ: %s", diff(got, before))
			}
		})
	}
}
