package sqs

import (
	"context"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// testURL is the ElasticMQ URL from BQ_SQS_URL (fails under CI=true when missing).
func testURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_SQS_URL", "sqs")
}

// openTest opens a transport on the test broker; the test's cleanup closes it.
func openTest(t testing.TB, opts ...Option) *Transport {
	t.Helper()
	raw := testURL(t)
	// A short long-poll keeps consumer Close (which waits for it) quick in tests.
	return openTestURL(t, raw, append([]Option{WithWaitTime(time.Second)}, opts...)...)
}

func openTestURL(t testing.TB, raw string, opts ...Option) *Transport {
	t.Helper()
	setTestCredentials(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Open(ctx, raw, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// setTestCredentials gives the default AWS chain the emulator's dummy keys when the
// environment has none, so the tests never reach for real credentials. It sets them for
// the whole test binary (parallel tests cannot use t.Setenv); a test that empties them
// with t.Setenv gets them back when it ends.
func setTestCredentials(t testing.TB) {
	t.Helper()
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
		_ = os.Setenv("AWS_ACCESS_KEY_ID", "x")
		_ = os.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	}
}

// rawClient is the transport's own client, for checks that look at the broker directly.
func rawClient(t testing.TB, tr *Transport) *awssqs.Client {
	t.Helper()
	c, ok := tr.client.(*awssqs.Client)
	if !ok {
		t.Fatal("transport does not wrap an *sqs.Client")
	}
	return c
}

// queueURL resolves (and creates) a queue through the transport.
func queueURL(t testing.TB, tr *Transport, queue string) string {
	t.Helper()
	u, err := tr.QueueURL(context.Background(), queue)
	if err != nil {
		t.Fatalf("QueueURL(%q): %v", queue, err)
	}
	return u
}

// deleteQueueLater removes a queue at the end of the test.
func deleteQueueLater(t testing.TB, tr *Transport, queue string) {
	t.Helper()
	t.Cleanup(func() {
		if u, ok := tr.urls.Load(tr.QueueName(queue)); ok {
			_, _ = rawClient(t, tr).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u.(string))})
		}
	})
}

// proxies maps each transport openProxied opened to the fault proxy its calls go through.
var proxies sync.Map // *Transport -> *faultproxy.Proxy

// openProxied opens a transport on the test broker whose every call goes through a
// loopback fault proxy, so a test can take ElasticMQ away from it and bring it back
// without stopping the shared broker.
func openProxied(t *testing.T, query string, opts ...Option) (*Transport, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	ep, err := url.Parse(q.Get("endpoint"))
	if err != nil || ep.Host == "" {
		t.Fatalf("BQ_SQS_URL has no endpoint to proxy: %v", err)
	}
	p := faultproxy.Start(t, ep.Host)
	q.Set("endpoint", "http://"+p.Addr())
	u.RawQuery = q.Encode()
	if query != "" {
		u.RawQuery += "&" + query
	}
	tr := openTestURL(t, u.String(), append([]Option{WithWaitTime(time.Second)}, opts...)...)
	proxies.Store(tr, p)
	t.Cleanup(func() { proxies.Delete(tr) })
	return tr, p
}

// proxyOf returns the fault proxy of a transport openProxied opened.
func proxyOf(t *testing.T, tr *Transport) *faultproxy.Proxy {
	t.Helper()
	p, ok := proxies.Load(tr)
	if !ok {
		t.Fatal("transport was not opened through a fault proxy")
	}
	return p.(*faultproxy.Proxy)
}

// openProxiedWith opens another transport whose calls go through the fault proxy p.
func openProxiedWith(t *testing.T, p *faultproxy.Proxy, query string, opts ...Option) *Transport {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("endpoint", "http://"+p.Addr())
	u.RawQuery = q.Encode() + "&" + query
	return openTestURL(t, u.String(), append([]Option{WithWaitTime(time.Second)}, opts...)...)
}
