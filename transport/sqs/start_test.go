package sqs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// noAWSCredentials empties every source of the default credential chain but the
// instance metadata service, which it points at a loopback server that knows no role
// (and refuses IMDSv2 tokens, so the SDK warns that it falls back to IMDSv1). It
// returns how many requests that server got.
func noAWSCredentials(t *testing.T) *atomic.Int32 {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_EC2_METADATA_DISABLED"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", dir)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	var hits atomic.Int32
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method == http.MethodPut {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(imds.Close)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
	return &hits
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(brokerproc.FreePort(t)) }

// As a new user meets it against an emulator: without credentials, Open fails at once
// and says which are missing and how to give them, and it never asks the EC2 metadata
// service, which cannot hold a role for a broker on this machine.
func TestOpenWithoutCredentialsOnLoopback(t *testing.T) {
	hits := noAWSCredentials(t)
	_, err := babelqueue.Open(context.Background(), "sqs://us-east-1?endpoint=http://"+closedAddr(t))
	if !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("Open without credentials = %v, want ErrNoCredentials", err)
	}
	for _, want := range []string{"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set", "ElasticMQ", "AWS_PROFILE", "sqs.New", "metadata service is not asked"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the EC2 metadata service was asked %d times with a loopback endpoint", n)
	}
}

// Half a key pair is named as such.
func TestOpenWithHalfACredential(t *testing.T) {
	noAWSCredentials(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEONLY")
	_, err := Open(context.Background(), "sqs://us-east-1?endpoint=http://"+closedAddr(t))
	if !errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not") {
		t.Fatalf("Open with only a key id = %v", err)
	}
	if strings.Contains(err.Error(), "AKIAEXAMPLEONLY") {
		t.Errorf("error echoes the key id: %v", err)
	}
}

// Without a loopback endpoint the chain does ask the metadata service (an instance
// role is a normal way to run on AWS), and the SDK's own warnings reach the App's
// logger instead of the standard logger.
func TestOpenWithoutCredentialsElsewhereAsksIMDSAndLogsThroughSlog(t *testing.T) {
	hits := noAWSCredentials(t)
	var logs transporttest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, err := babelqueue.Open(context.Background(), "sqs://us-east-1", babelqueue.WithLogger(logger))
	if !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("Open without credentials = %v, want ErrNoCredentials", err)
	}
	if strings.Contains(err.Error(), "metadata service is not asked") {
		t.Errorf("error claims the metadata service was not asked: %v", err)
	}
	if hits.Load() == 0 {
		t.Error("the metadata service was not asked without a loopback endpoint")
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "IMDSv1") || !strings.Contains(out, "component=aws-sdk") {
		t.Errorf("the SDK's warning did not reach the App's logger:\n%s", out)
	}
}

// An endpoint where nothing answers fails Open with one error naming it.
func TestOpenUnreachableEndpoint(t *testing.T) {
	setTestCredentials(t)
	addr := closedAddr(t)
	_, err := babelqueue.Open(context.Background(), "sqs://us-east-1?connect_timeout=3s&endpoint=http://"+addr)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Open on %s = %v, want ErrUnreachable", addr, err)
	}
	for _, want := range []string{"http://" + addr, "connect_timeout", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}

// closingBody answers reads with io.EOF once it is closed, as the SDK's request bodies
// do (smithy-go's safe closer).
type closingBody struct {
	r      *strings.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closingBody) Close() error { b.closed = true; return nil }

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// TestRequestBodiesInMemory: the body net/http sends is a copy in memory, whole after the
// SDK closed its own body (which the SDK does as soon as the response headers are in,
// while net/http may still read the body to check for extra bytes; that read failing
// made net/http close the connection under the response and the SDK send the request
// again, hiding a ReceiveMessage's messages until their visibility timeout).
func TestRequestBodiesInMemory(t *testing.T) {
	var sent *http.Request
	c := bufferedBodies{doFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}
	sdk := &closingBody{r: strings.NewReader(`{"QueueUrl":"q"}`)}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9/", sdk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = sdk.Close()
	b, err := io.ReadAll(sent.Body)
	if err != nil || string(b) != `{"QueueUrl":"q"}` {
		t.Fatalf("the body sent after the SDK closed its own = %q, %v", b, err)
	}
	if n, err := io.Copy(io.Discard, sent.Body); n != 0 || err != nil {
		t.Errorf("a read past the end = %d, %v, want 0, nil", n, err)
	}
	again, err := sent.GetBody()
	if b, _ := io.ReadAll(again); err != nil || string(b) != `{"QueueUrl":"q"}` {
		t.Errorf("GetBody = %q, %v", b, err)
	}
}

// TestTimeoutDropsIdleConnections: once a request ran out of time on a connection that
// went silent, the next request does not take another pooled connection that went silent
// with it: it dials a fresh one and is answered (the SQS fault suite's blackhole
// scenarios, where every pooled connection froze at once).
func TestTimeoutDropsIdleConnections(t *testing.T) {
	var (
		mu     sync.Mutex
		old    = map[string]bool{} // connections made before the freeze
		frozen bool
	)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		silent := frozen && old[r.RemoteAddr]
		if !frozen {
			old[r.RemoteAddr] = true
		}
		mu.Unlock()
		if silent {
			<-done
			return
		}
		time.Sleep(20 * time.Millisecond) // long enough for the warm-up requests to overlap
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	defer close(done)

	c := bufferedBodies{closableClient(awshttp.NewBuildableClient())}
	call := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	var wg sync.WaitGroup // three connections in the pool
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = call(5 * time.Second) }()
	}
	wg.Wait()
	mu.Lock()
	pooled := len(old)
	frozen = true
	mu.Unlock()
	if pooled < 2 {
		t.Fatalf("the warm-up opened %d connection(s), want at least 2", pooled)
	}

	if err := call(200 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request on a silent connection = %v, want a deadline exceeded", err)
	}
	if err := call(2 * time.Second); err != nil {
		t.Fatalf("the request after the timeout = %v, want an answer on a fresh connection", err)
	}
}

// TestClosableClientFollowsNoRedirect: the client made of the SDK's default keeps its
// rule of following no redirect; any other client is kept as it is.
func TestClosableClientFollowsNoRedirect(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	c := closableClient(awshttp.NewBuildableClient())
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Errorf("status = %d, want the redirect itself (%d)", resp.StatusCode, http.StatusFound)
	}
	own := doFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	if _, ok := closableClient(own).(doFunc); !ok {
		t.Error("a client of the user's was replaced")
	}
}
