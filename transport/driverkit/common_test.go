package driverkit_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// TestCommonRefusesBadValues: every setter keeps a good value and records a bad one as
// an OptionError naming the option function, leaving the default in place.
func TestCommonRefusesBadValues(t *testing.T) {
	c := driverkit.NewCommon("mybroker", 10*time.Second, 1000, 2000)
	if c.Logger != slog.Default() || c.Err() != nil {
		t.Fatalf("defaults: logger %v, err %v", c.Logger, c.Err())
	}
	l := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	c.SetLogger(l)
	c.SetLogger(nil)
	c.SetConnectTimeout(time.Second)
	c.SetMaxMessageSize(2000)
	if c.Logger != l || c.ConnectTimeout != time.Second || c.MaxMessageSize != 2000 || c.Err() != nil {
		t.Fatalf("good values: %+v, err %v", c, c.Err())
	}
	c.SetConnectTimeout(0)
	c.SetMaxMessageSize(2001)
	c.SetMaxMessageSize(0)
	err := c.Err()
	if !errors.Is(err, transport.ErrInvalidOption) || c.ConnectTimeout != time.Second || c.MaxMessageSize != 2000 {
		t.Fatalf("bad values: err %v, settings %+v", err, c)
	}
	for _, want := range []string{"mybroker", "WithConnectTimeout", "WithMaxMessageSize", "want 1 to 2000 bytes, got 2001", "got 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	open := driverkit.NewCommon("b", time.Second, 10, 0)
	open.MinMessageSize = 5
	open.SetMaxMessageSize(1 << 40)
	open.SetMaxMessageSize(4)
	if open.MaxMessageSize != 1<<40 || !strings.Contains(open.Err().Error(), "want at least 5 bytes, got 4") {
		t.Fatalf("no upper bound: %d, %v", open.MaxMessageSize, open.Err())
	}
}

// TestCommonQuery: connect_timeout and max_message_size are read from a URL within
// their bounds; a bad one is an error naming the parameter.
func TestCommonQuery(t *testing.T) {
	for _, tc := range []struct {
		query   string
		connect time.Duration
		size    int
		bad     string
	}{
		{query: "", connect: 10 * time.Second, size: 1000},
		{query: "connect_timeout=3&max_message_size=1500", connect: 3 * time.Second, size: 1500},
		{query: "connect_timeout=5ms", bad: "connect_timeout"},
		{query: "max_message_size=1023", bad: "max_message_size"},
		{query: "max_message_size=2001", bad: "max_message_size"},
	} {
		c := driverkit.NewCommon("b", 10*time.Second, 1000, 2000)
		params := driverkit.CommonParams(c, time.Duration.String, strconv.Itoa)
		q, err := driverkit.ParseQuery("b", &url.URL{Scheme: "b", Host: "h", RawQuery: tc.query}, params.Names()...)
		if opts, perr := params.Read(q); err == nil && (perr == nil) != (tc.bad == "") {
			t.Errorf("%q: CommonParams read %v, %v", tc.query, opts, perr)
		}
		if err == nil {
			err = c.Query(q)
		}
		switch {
		case tc.bad != "":
			if !errors.Is(err, transport.ErrInvalidOption) || !errors.Is(err, transport.ErrBadURL) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%q: err %v, want one naming %s", tc.query, err, tc.bad)
			}
		case err != nil || c.ConnectTimeout != tc.connect || c.MaxMessageSize != tc.size:
			t.Errorf("%q: %v, %d, %v; want %v, %d", tc.query, c.ConnectTimeout, c.MaxMessageSize, err, tc.connect, tc.size)
		}
	}
}

// TestCommonCheckSize: the limit less the reserve, with the driver and queue named.
func TestCommonCheckSize(t *testing.T) {
	c := driverkit.NewCommon("b", time.Second, 100, 0)
	if err := c.CheckSize("q", 90, 10); err != nil {
		t.Fatalf("90 of 100-10: %v", err)
	}
	err := c.CheckSize("q", 91, 10)
	var tl *transport.TooLargeError
	if !errors.Is(err, transport.ErrTooLarge) || !errors.As(err, &tl) || tl.Limit != 90 || tl.Size != 91 {
		t.Fatalf("91 of 100-10: %v", err)
	}
}

// TestPoolMakesOnceAndCloses: concurrent first Gets make one client; a failed make is
// forgotten; Drop replaces a client; Close frees every client and refuses Get.
func TestPoolMakesOnceAndCloses(t *testing.T) {
	type client struct{ name string }
	var made, freed atomic.Int32
	fail := atomic.Bool{}
	fail.Store(true)
	p := &driverkit.Pool[*client]{
		Make: func(name string) (*client, error) {
			if name == "flaky" && fail.Swap(false) {
				return nil, errors.New("refused")
			}
			made.Add(1)
			time.Sleep(5 * time.Millisecond)
			return &client{name}, nil
		},
		Free: func(context.Context, *client) error { freed.Add(1); return nil },
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	got := make([]*client, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = p.Get(ctx, "a") }()
	}
	wg.Wait()
	for _, c := range got {
		if c == nil || c != got[0] {
			t.Fatalf("concurrent Gets got %v", got)
		}
	}
	if _, err := p.Get(ctx, "flaky"); err == nil {
		t.Fatal("a failed make is not reported")
	}
	if c, err := p.Get(ctx, "flaky"); err != nil || c.name != "flaky" {
		t.Fatalf("a failed make is not tried again: %v, %v", c, err)
	}
	p.Drop("a", &client{"a"}) // not the pooled one: kept
	if c, _ := p.Get(ctx, "a"); c != got[0] {
		t.Fatal("Drop of another client dropped the pooled one")
	}
	p.Drop("a", got[0])
	if c, _ := p.Get(ctx, "a"); c == got[0] {
		t.Fatal("Drop kept the client")
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "a"); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	deadline := time.Now().Add(time.Second)
	for freed.Load() != made.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // Drop frees in the background
	}
	if freed.Load() != made.Load() || made.Load() != 3 {
		t.Fatalf("made %d, freed %d", made.Load(), freed.Load())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestPoolCloseReportsAndBounds: Free's errors are joined naming the destination, a
// Get whose ctx ends stops waiting, and a client made after Close is freed.
func TestPoolCloseReportsAndBounds(t *testing.T) {
	release := make(chan struct{})
	var freed atomic.Int32
	p := &driverkit.Pool[int]{
		Make: func(name string) (int, error) {
			if name == "slow" {
				<-release
			}
			return len(name), nil
		},
		Free: func(_ context.Context, n int) error {
			freed.Add(1)
			if n == 3 {
				return errors.New("flush failed")
			}
			return nil
		},
	}
	if _, err := p.Get(context.Background(), "bad"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Get(ctx, "slow"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of a slow make: %v", err)
	}
	err := p.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), "flush failed") {
		t.Fatalf("Close: %v", err)
	}
	close(release)
	deadline := time.Now().Add(time.Second)
	for freed.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if freed.Load() != 2 {
		t.Fatalf("the client made after Close was not freed: %d freed", freed.Load())
	}
}

// TestReceipts: outcomes in batch order; a write never handed over keeps its Set error;
// Wait reports the writes still open when ctx ends, and a late Done changes nothing.
func TestReceipts(t *testing.T) {
	r := driverkit.NewReceipts(4)
	refused := errors.New("refused")
	r.Set(0, refused)
	r.Expect(1)
	r.Expect(2)
	r.Expect(3)
	go func() {
		r.Done(2, refused)
		r.Done(1, nil)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errs := r.Wait(ctx)
	if errs[0] != refused || errs[1] != nil || errs[2] != refused || !errors.Is(errs[3], context.DeadlineExceeded) {
		t.Fatalf("outcomes %v", errs)
	}
	r.Done(3, nil)
	if !errors.Is(errs[3], context.DeadlineExceeded) {
		t.Fatal("a late Done changed the outcome")
	}
	done := driverkit.NewReceipts(1)
	done.Expect(0)
	done.Done(0, nil)
	if errs := done.Wait(context.Background()); errs[0] != nil {
		t.Fatalf("all done: %v", errs)
	}
}

// TestClientLog: the client's Info lines are logged at Debug, warnings as they are,
// and Watch sees warnings even when the handler drops them.
func TestClientLog(t *testing.T) {
	var buf bytes.Buffer
	var watched []string
	h := driverkit.ClientLog{
		Handler:   slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}),
		Level:     driverkit.InfoAsDebug,
		Watch:     func(r slog.Record) { watched = append(watched, r.Message) },
		WatchFrom: slog.LevelWarn,
	}
	l := slog.New(h).With("component", "client")
	l.Info("connected")
	l.Warn("refused")
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg=connected component=client`) || !strings.Contains(out, `level=WARN msg=refused`) {
		t.Fatalf("logged:\n%s", out)
	}
	if len(watched) != 1 || watched[0] != "refused" {
		t.Fatalf("watched %v", watched)
	}
	buf.Reset()
	quiet := slog.New(driverkit.ClientLog{Handler: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}),
		Watch: func(r slog.Record) { watched = append(watched, r.Message) }, WatchFrom: slog.LevelWarn})
	quiet.Warn("refused again")
	if buf.Len() != 0 || len(watched) != 2 {
		t.Fatalf("a warning below the handler's level: logged %q, watched %v", buf.String(), watched)
	}
}

// TestHTTPURLs: CheckHTTPURL says what is wrong; IsLoopback knows this machine;
// ParseURL never echoes a password.
func TestHTTPURLs(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:9324": "", "https://h": "", "": "empty", "ftp://h": "want an http:// or https:// URL",
		"http://u:p@h": "must not hold credentials", "http://": "has no host", "http://h/%zz": "not a URL",
	} {
		if got := driverkit.CheckHTTPURL(raw); got != want {
			t.Errorf("CheckHTTPURL(%q) = %q, want %q", raw, got, want)
		}
	}
	for raw, want := range map[string]bool{"http://localhost:1": true, "http://a.localhost": true, "http://127.0.0.2": true,
		"http://[::1]:3": true, "http://10.0.0.1": false, "https://sqs.eu-west-1.amazonaws.com": false, "": false} {
		if got := driverkit.IsLoopback(raw); got != want {
			t.Errorf("IsLoopback(%q) = %v", raw, got)
		}
	}
	if _, err := driverkit.ParseURL("x", "x://u:secret@h/%zz"); !errors.Is(err, transport.ErrBadURL) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("ParseURL: %v", err)
	}
}

// TestCoalescer: calls made while a request is on its way go together in the next one,
// each gets its own outcome (or the one error of the request), and a caller whose ctx
// ends stops waiting.
func TestCoalescer(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var requests [][]int
	c := &driverkit.Coalescer[int]{Send: func(items []int) []error {
		mu.Lock()
		requests = append(requests, append([]int(nil), items...))
		first := len(requests) == 1
		mu.Unlock()
		if first {
			<-release // the first request is on its way while the others come
			return nil
		}
		if items[0] == 99 {
			return []error{errors.New("all refused")}
		}
		errs := make([]error, len(items))
		for i, v := range items {
			if v%2 == 1 {
				errs[i] = errors.New("odd")
			}
		}
		return errs
	}}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Do(ctx, 0); err != nil {
			t.Errorf("first: %v", err)
		}
	}()
	for len(snapshot(&mu, &requests)) == 0 {
		time.Sleep(time.Millisecond)
	}
	errs := make([]error, 4)
	for i := 1; i <= 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i-1] = c.Do(ctx, i) }()
	}
	time.Sleep(20 * time.Millisecond) // let all four join the next request
	close(release)
	wg.Wait()
	reqs := snapshot(&mu, &requests)
	if len(reqs) != 2 || len(reqs[1]) != 4 {
		t.Fatalf("requests %v, want [[0] [four items]]", reqs)
	}
	for i, err := range errs {
		if (err != nil) != ((i+1)%2 == 1) {
			t.Errorf("item %d: %v", i+1, err)
		}
	}
	if err := c.Do(ctx, 99); err == nil || err.Error() != "all refused" {
		t.Fatalf("one error for the request: %v", err)
	}
	block := &driverkit.Coalescer[int]{Send: func([]int) []error { select {} }}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := block.Do(cctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx ended: %v", err)
	}
}

func snapshot(mu *sync.Mutex, r *[][]int) [][]int {
	mu.Lock()
	defer mu.Unlock()
	return append([][]int(nil), (*r)...)
}

// TestAwait: the call's result when it comes first; ctx's error when ctx ends first,
// and the late result handed to abandon.
func TestAwait(t *testing.T) {
	if v, err := driverkit.Await(context.Background(), func() (int, error) { return 7, nil }, nil); v != 7 || err != nil {
		t.Fatalf("Await = %d, %v", v, err)
	}
	abandoned := make(chan int, 1)
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := driverkit.Await(ctx, func() (int, error) { <-release; return 8, nil }, func(v int) { abandoned <- v })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Await after cancel: %v", err)
	}
	close(release)
	select {
	case v := <-abandoned:
		if v != 8 {
			t.Fatalf("abandoned %d", v)
		}
	case <-time.After(time.Second):
		t.Fatal("the late result was not abandoned")
	}
}

// TestPublishRuns: consecutive messages to one queue go in one call, within the count
// and size bounds and in order; a refused message is reported and the others go on; a
// call that fails as a whole fails its messages and leaves the rest not attempted.
func TestPublishRuns(t *testing.T) {
	msg := func(q, body string) *transport.Message { return &transport.Message{Queue: q, Body: []byte(body)} }
	msgs := []*transport.Message{msg("a", "1"), msg("a", "22"), msg("a", "333"), msg("b", "4"), msg("b", ""), msg("b", "5"), msg("a", "6")}
	var calls []string
	refuse := errors.New("refused")
	prepare := func(m *transport.Message) (string, int, error) {
		if len(m.Body) == 0 {
			return "", 0, refuse
		}
		return string(m.Body), len(m.Body), nil
	}
	send := func(_ context.Context, r *driverkit.Run[string]) ([]error, error) {
		calls = append(calls, r.Queue+":"+strings.Join(r.Entries, ","))
		each := make([]error, len(r.Entries))
		for k, e := range r.Entries {
			if e == "22" {
				each[k] = refuse
			}
		}
		return each, nil
	}
	err := driverkit.PublishRuns(context.Background(), msgs, 2, 5, prepare, send)
	if got := strings.Join(calls, " "); got != "a:1,22 a:333 b:4,5 a:6" {
		t.Fatalf("calls %q", got)
	}
	var be *transport.BatchError
	if !errors.As(err, &be) || be.Errs[1] != refuse || be.Errs[4] != refuse || be.Errs[0] != nil || be.Errs[6] != nil {
		t.Fatalf("results %v", err)
	}
	calls = nil
	down := errors.New("unreachable")
	err = driverkit.PublishRuns(context.Background(), msgs, 2, 5, prepare, func(_ context.Context, r *driverkit.Run[string]) ([]error, error) {
		calls = append(calls, r.Queue)
		return nil, down
	})
	if !errors.As(err, &be) || len(calls) != 1 || be.Errs[0] != down || be.Errs[1] != down ||
		!errors.Is(be.Errs[2], transport.ErrNotAttempted) || !errors.Is(be.Errs[4], transport.ErrNotAttempted) || !errors.Is(be.Errs[6], transport.ErrNotAttempted) {
		t.Fatalf("a failed call: calls %v, %v", calls, err)
	}
	if err := driverkit.PublishRuns(context.Background(), msgs[:1], 2, 5, prepare, send); err != nil {
		t.Fatalf("all sent: %v", err)
	}
}

// TestProject: the known fields of a projection, in order, under the binding's names;
// an empty projection (a raw write) projects nothing.
func TestProject(t *testing.T) {
	var got []string
	set := func(name, text string, number bool, n int64) {
		if number && strconv.FormatInt(n, 10) != text {
			t.Errorf("%s: text %q, number %d", name, text, n)
		}
		got = append(got, name+"="+text)
	}
	driverkit.Project(transport.Projection{URN: "urn:x", TraceID: "t", MessageID: "m", SchemaVersion: 2, Lang: "go", CreatedAt: 1700000000000}, set)
	want := "bq-job=urn:x bq-trace-id=t bq-message-id=m bq-schema-version=2 bq-source-lang=go bq-created-at=1700000000000"
	if strings.Join(got, " ") != want {
		t.Fatalf("projected %v", got)
	}
	got = nil
	driverkit.Project(transport.Projection{}, set)
	if len(got) != 0 {
		t.Fatalf("a raw write projected %v", got)
	}
}

// TestSetHeader: the first header makes the map, the next ones go in it.
func TestSetHeader(t *testing.T) {
	var d transport.Delivery
	driverkit.SetHeader(&d, "traceparent", "00-1")
	driverkit.SetHeader(&d, "x-b", "")
	if len(d.Headers) != 2 || d.Headers["traceparent"] != "00-1" || d.Headers["x-b"] != "" {
		t.Errorf("Headers = %v", d.Headers)
	}
}

// TestReach: a node that accepts is enough; none accepting is every node's error.
func TestReach(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := closed.Addr().String()
	closed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := driverkit.Reach(ctx, []string{dead, ln.Addr().String()}, nil); err != nil {
		t.Fatalf("one node accepts: %v", err)
	}
	if err := driverkit.Reach(ctx, []string{dead, dead}, nil); err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("no node accepts: %v", err)
	}
	// A certificate the client refuses stops at the first node: it answered.
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	err = driverkit.Reach(ctx, []string{srv.Listener.Addr().String(), ln.Addr().String()}, &tls.Config{ServerName: "example.com"})
	if !transport.IsTLSError(err) {
		t.Fatalf("a refused certificate: %v", err)
	}
	if err := driverkit.Reach(ctx, []string{srv.Listener.Addr().String()}, srv.Client().Transport.(*http.Transport).TLSClientConfig); err != nil {
		t.Fatalf("a trusted certificate: %v", err)
	}
}

// TestRefuseParts: the first part the URL has is refused, naming its parameter.
func TestRefuseParts(t *testing.T) {
	parts := []driverkit.URLPart{{"opaque", "host", "o"}, {"user", "userinfo", "u"}, {"port", "region", "p"}, {"path", "path", "pa"}, {"fragment", "fragment", "f"}}
	for raw, param := range map[string]string{"x:opaque": "host", "x://u:secret@h:1/p": "userinfo", "x://h:1/p": "region",
		"x://h/p#f": "path", "x://h/#f": "fragment", "x://h/": "", "x://h": ""} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		err = driverkit.RefuseParts("x", u, parts...)
		var bad *transport.BadURLError
		if param == "" && err != nil || param != "" && (!errors.As(err, &bad) || bad.Param != param || strings.Contains(err.Error(), "secret")) {
			t.Errorf("%s: %v, want param %q", raw, err, param)
		}
	}
}

// TestPoller: a poll is never cancelled for its caller; what it receives after its
// caller stopped waiting goes to the next Receive, extra messages wait their turn, a
// poll's error goes to one Receive, and Drain returns what nobody took.
func TestPoller(t *testing.T) {
	release, last := make(chan struct{}), make(chan struct{})
	var polls atomic.Int32
	p := &driverkit.Poller[int]{Poll: func(n int) ([]int, error) {
		switch polls.Add(1) {
		case 1:
			<-release
			return []int{1, 2, 3}, nil
		case 2:
			return nil, errors.New("throttled")
		case 4:
			<-last
		}
		return []int{9}, nil
	}}
	closed := make(chan struct{})
	into := make([]int, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Receive(ctx, closed, into); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Receive whose ctx ended: %v", err)
	}
	close(release)
	bg := context.Background()
	if n, err := p.Receive(bg, closed, into); n != 2 || err != nil || into[0] != 1 || into[1] != 2 {
		t.Fatalf("the abandoned poll's messages: %d %v %v", n, into, err)
	}
	if w := p.Waiting(func(m int) bool { return m == 3 }); len(w) != 1 {
		t.Fatalf("waiting %v", w)
	}
	if n, err := p.Receive(bg, closed, into); n != 1 || err != nil || into[0] != 3 {
		t.Fatalf("the extra message: %d %v %v", n, into, err)
	}
	if _, err := p.Receive(bg, closed, into); err == nil || err.Error() != "throttled" {
		t.Fatalf("the poll's error: %v", err)
	}
	if n, err := p.Receive(bg, closed, into[:1]); n != 1 || err != nil || into[0] != 9 {
		t.Fatalf("after the error: %d %v", n, err)
	}
	if polls.Load() != 3 {
		t.Fatalf("%d polls for three calls' worth", polls.Load())
	}
	close(closed)
	if _, err := p.Receive(bg, closed, into); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	short, cancelShort := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancelShort()
	p.Wait(short) // the poll in flight is not done: Wait gives up with ctx
	close(last)
	if back := p.Drain(); len(back) != 1 || back[0] != 9 {
		t.Fatalf("Drain %v", back)
	}
	if back := p.Drain(); len(back) != 0 {
		t.Fatalf("second Drain %v", back)
	}
}

// TestAMQPBody: Data sections joined, an AmqpValue string or binary, else empty.
func TestAMQPBody(t *testing.T) {
	for _, c := range []struct {
		data  [][]byte
		value any
		want  string
	}{
		{[][]byte{[]byte(`{"a"`), []byte(`:1}`)}, nil, `{"a":1}`},
		{[][]byte{{}}, nil, ""},
		{nil, `{"s":1}`, `{"s":1}`},
		{nil, []byte(`{"b":1}`), `{"b":1}`},
		{nil, int64(7), ""},
		{nil, nil, ""},
	} {
		got := driverkit.AMQPBody(c.data, c.value)
		if got == nil || string(got) != c.want {
			t.Errorf("AMQPBody(%q, %v) = %q, want %q", c.data, c.value, got, c.want)
		}
	}
	one := []byte(`{"one":1}`)
	if got := driverkit.AMQPBody([][]byte{one}, nil); &got[0] != &one[0] {
		t.Error("AMQPBody copied the one Data section")
	}
}

type symbol string

// TestSchemaValue: every AMQP type a schema-version property may have, in the forms the
// gate reads; none but the integer 1 and the text "1" reads as version 1.
func TestSchemaValue(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in   any
		want any
	}{
		{nil, nil}, {"1", "1"}, {symbol("1"), "1"}, {int8(1), int64(1)}, {int16(-2), int64(-2)}, {int32(1), int64(1)},
		{int64(3), int64(3)}, {1, int64(1)}, {uint8(1), int64(1)}, {uint16(2), int64(2)}, {uint32(1), int64(1)},
		{uint64(1), int64(1)}, {uint(4), int64(4)}, {uint64(math.MaxUint64), "18446744073709551615"},
		{float32(1.5), 1.5}, {1.0, 1.0}, {true, true}, {[]byte("1"), "binary:[49]"},
		{at, "timestamp:2026-01-02T03:04:05Z"}, {[]int{1}, "[]int:[1]"},
	} {
		if got := driverkit.SchemaValue(c.in); got != c.want {
			t.Errorf("SchemaValue(%#v) = %#v, want %#v", c.in, got, c.want)
		}
	}
}

// A client Drop forgets is closed with Discard when one is set (a client that failed a
// write may be closing itself: no flush), and with Free otherwise.
func TestPoolDropUsesDiscard(t *testing.T) {
	for _, withDiscard := range []bool{false, true} {
		freed, discarded := make(chan int, 1), make(chan int, 1)
		p := driverkit.Pool[int]{
			Make: func(string) (int, error) { return 7, nil },
			Free: func(_ context.Context, c int) error { freed <- c; return nil },
		}
		if withDiscard {
			p.Discard = func(_ context.Context, c int) error { discarded <- c; return nil }
		}
		c, err := p.Get(context.Background(), "q")
		if err != nil {
			t.Fatal(err)
		}
		p.Drop("q", c)
		want, other := freed, discarded
		if withDiscard {
			want, other = discarded, freed
		}
		select {
		case got := <-want:
			if got != 7 {
				t.Errorf("discard=%v: closed client %d, want 7", withDiscard, got)
			}
		case <-time.After(5 * time.Second): // a hang guard
			t.Fatalf("discard=%v: the dropped client was not closed the expected way", withDiscard)
		}
		select {
		case <-other:
			t.Errorf("discard=%v: the dropped client was closed both ways", withDiscard)
		default:
		}
	}
}
