package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

var seedTime = time.Now().Add(-time.Hour).Truncate(time.Second)

// memoryConsole serves a console over a memory broker whose orders.dlq holds n
// seeded dead letters.
func memoryConsole(t *testing.T, n int, opts ...console.Option) (*httptest.Server, *memory.Transport, dlqtest.Seed) {
	t.Helper()
	tr := memory.New()
	s := dlqtest.Mixed("orders", "orders.dlq", n, seedTime)
	for _, m := range s.Messages() {
		if err := tr.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	srv := serve(t, []console.Broker{{URL: "memory://", Transport: tr, Queues: []console.Queue{{Name: "orders"}, {Name: "payments"}}}},
		append([]console.Option{console.WithSampleInterval(200 * time.Millisecond)}, opts...)...)
	return srv, tr, s
}

// serve builds a console and serves it until the test ends.
func serve(t *testing.T, brokers []console.Broker, opts ...console.Option) *httptest.Server {
	t.Helper()
	c, err := console.New(brokers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		srv.Close()
		_ = c.Close()
	})
	return srv
}

// client is a browser-like HTTP client: it keeps cookies and does not follow
// redirects.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (c *client) get(path string) (*http.Response, string) { return c.do("GET", path, nil, nil) }

var csrfRE = regexp.MustCompile(`<meta name="csrf-token" content="([^"]*)">`)

// csrf loads a page and returns the session's CSRF token.
func (c *client) csrf() string {
	c.t.Helper()
	_, body := c.get("/")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil || m[1] == "" {
		c.t.Fatalf("no CSRF token on the page:\n%s", body)
	}
	return m[1]
}

// postJSON posts v with the CSRF token (when not empty).
func (c *client) postJSON(path, token string, v any) (*http.Response, map[string]any) {
	c.t.Helper()
	b, _ := json.Marshal(v)
	h := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		h["X-CSRF-Token"] = token
	}
	resp, body := c.do("POST", path, strings.NewReader(string(b)), h)
	var out map[string]any
	_ = json.Unmarshal([]byte(body), &out)
	return resp, out
}

func (c *client) getJSON(path string, v any) {
	c.t.Helper()
	resp, body := c.get(path)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		c.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

// dlqView is the JSON of GET /api/dlq.
type dlqView struct {
	Ready    bool `json:"ready"`
	Total    int  `json:"total"`
	Matching int  `json:"matching"`
	Poison   int  `json:"poison"`
	Groups   map[string]struct {
		Rows []struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		} `json:"rows"`
	} `json:"groups"`
	Rows []struct {
		Ref    string `json:"ref"`
		ID     string `json:"id"`
		Reason string `json:"reason"`
		URL    string `json:"url"`
	} `json:"rows"`
	Pages int `json:"pages"`
}

func (v dlqView) counts(dim string) map[string]int {
	out := map[string]int{}
	for _, r := range v.Groups[dim].Rows {
		out[r.Key] = r.Count
	}
	return out
}

// ids returns the meta.ids of the messages on queue (browsed); a message without
// one (poison) counts by its body.
func ids(t *testing.T, tr transport.Transport, queue string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]bool{}
	err := transport.BrowseAll(ctx, tr, queue, 1000, func(d *transport.Delivery) bool {
		var env struct {
			Meta struct {
				ID string `json:"id"`
			} `json:"meta"`
		}
		if json.Unmarshal(d.Body, &env) != nil || env.Meta.ID == "" {
			out["body:"+string(d.Body)] = true
			return true
		}
		out[env.Meta.ID] = true
		return true
	})
	if err != nil {
		t.Fatalf("browse %s: %v", queue, err)
	}
	return out
}
