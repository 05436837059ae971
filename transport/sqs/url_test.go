package sqs

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func TestOpenRejectsBadURLs(t *testing.T) {
	setTestCredentials(t)
	cases := []struct {
		url   string
		param string
	}{
		{"sqs://", "region"},
		{"sqs://us-east-1?visibility=30", "visibility"},
		{"sqs://us-east-1?endpoint=http://127.0.0.1:9324&Fifo=1", "Fifo"},
		{"sqs://us-east-1?fifo=maybe", "fifo"},
		{"sqs://us-east-1?wait_time=21", "wait_time"},
		{"sqs://us-east-1?wait_time=-1", "wait_time"},
		{"sqs://us-east-1?wait_time=20.5s", "wait_time"},
		{"sqs://us-east-1?wait_time=soon", "wait_time"},
		{"sqs://us-east-1?visibility_timeout=0", "visibility_timeout"},
		{"sqs://us-east-1?visibility_timeout=13h", "visibility_timeout"},
		{"sqs://us-east-1?max_message_size=1048577", "max_message_size"},
		{"sqs://us-east-1?max_message_size=1MiB", "max_message_size"},
		{"sqs://us-east-1?connect_timeout=-1s", "connect_timeout"},
		{"sqs://us-east-1?group_id=", "group_id"},
		{"sqs://us-east-1?group_id=" + strings.Repeat("g", 129), "group_id"},
		{"sqs://us-east-1?group_id=has%20space", "group_id"},
		{"sqs://us-east-1?endpoint=", "endpoint"},
		{"sqs://us-east-1?endpoint=ftp://127.0.0.1:9324", "endpoint"},
		{"sqs://us-east-1?endpoint=127.0.0.1:9324", "endpoint"},
		{"sqs://us-east-1?prefix=queues", "prefix"},
		{"sqs://us-east-1?fifo=1&fifo=0", "fifo"},
		{"sqs://us-east-1/orders", "path"},
		{"sqs://us-east-1:9324", "region"},
		{"sqs://US_EAST?fifo=1", "region"},
		{"sqs://AKIAEXAMPLE:hunter2secret@us-east-1", "userinfo"},
		{"sqs://us-east-1?endpoint=http://admin:hunter2secret@127.0.0.1:9324", "endpoint"},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			tr, err := transport.Open(context.Background(), c.url)
			if err == nil {
				_ = tr.Close(context.Background())
				t.Fatalf("Open(%q) succeeded, want an error naming %q", c.url, c.param)
			}
			if !errors.Is(err, transport.ErrBadURL) {
				t.Errorf("error %v does not match transport.ErrBadURL", err)
			}
			var bu *transport.BadURLError
			if !errors.As(err, &bu) || bu.Param != c.param {
				t.Errorf("error %v does not name the parameter %q", err, c.param)
			}
			if strings.Contains(err.Error(), "hunter2secret") {
				t.Errorf("error echoes a secret: %v", err)
			}
		})
	}
}

// parsed returns the transport an sqs:// URL describes, without a client.
func parsed(t *testing.T, raw string) *Transport {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseURL(u)
	if err != nil {
		t.Fatalf("parseURL(%q): %v", raw, err)
	}
	return newTransport(nil, s.opts...)
}

func TestURLAcceptsEveryParameter(t *testing.T) {
	raw := "sqs://eu-central-1?endpoint=http://127.0.0.1:9324&prefix=http://127.0.0.1:9324/000000000000&fifo=1&group_id=orders-42&wait_time=3" +
		"&visibility_timeout=2m&max_message_size=262144&connect_timeout=1500ms"
	tr := parsed(t, raw)
	if tr.prefix != "http://127.0.0.1:9324/000000000000" || !tr.fifo || tr.groupID != "orders-42" || tr.waitTime != 3 ||
		tr.visibility != 2*time.Minute || tr.common.MaxMessageSize != 262144 || tr.common.ConnectTimeout != 1500*time.Millisecond {
		t.Errorf("settings not applied: prefix=%q fifo=%v group=%q wait=%d visibility=%s max=%d connect=%s",
			tr.prefix, tr.fifo, tr.groupID, tr.waitTime, tr.visibility, tr.common.MaxMessageSize, tr.common.ConnectTimeout)
	}
	// The one duration grammar: a Go duration or a bare number of seconds.
	if got := parsed(t, "sqs://us-east-1?wait_time=20s").waitTime; got != 20 {
		t.Errorf("wait_time=20s gave %ds", got)
	}
	// With a prefix the queue URL is built, never looked up.
	u, err := tr.QueueURL(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if u != "http://127.0.0.1:9324/000000000000/orders.fifo" {
		t.Errorf("QueueURL = %q", u)
	}
	caps := tr.Capabilities()
	if caps.Delay {
		t.Error("a FIFO transport reports per-message delay, which SQS FIFO queues do not have")
	}
	if got := settle.DeadLetterQueue("orders.fifo", "", "", caps); got != "orders-dlq.fifo" {
		t.Errorf("DLQ of orders.fifo = %q, want orders-dlq.fifo", got)
	}
	if got := settle.DeadLetterQueue("orders", "", "", caps); tr.QueueName(got) != "orders-dlq.fifo" {
		t.Errorf("DLQ of orders on fifo=1 is the SQS queue %q, want orders-dlq.fifo", tr.QueueName(got))
	}
	if got := settle.DeadLetterQueue("orders.fifo", "", "-x", caps); got != "orders-x.fifo" {
		t.Errorf("DLQ of orders.fifo with suffix -x = %q, want orders-x.fifo", got)
	}
	if got := settle.DeadLetterQueue("orders", "failed", "", caps); got != "failed" {
		t.Errorf("DLQ override = %q, want failed", got)
	}
}

func TestStandardCapabilities(t *testing.T) {
	tr := parsed(t, "sqs://us-east-1")
	c := tr.Capabilities()
	want := transport.Capabilities{
		Attempts: transport.AttemptsMaxNative, Delay: true, MaxDelay: 15 * time.Minute, HandOff: true,
		SchemaGate: true, DeadLetterSuffix: "-dlq", FIFOSuffix: ".fifo", PublishConfirmed: true,
	}
	if c != want {
		t.Errorf("Capabilities = %+v, want %+v", c, want)
	}
	if got := settle.DeadLetterQueue("orders", "", "", c); got != "orders-dlq" {
		t.Errorf("DLQ of orders = %q, want orders-dlq", got)
	}
	if tr.waitTime != 10 || tr.common.MaxMessageSize != MaxMessageSize || tr.common.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("defaults: wait time %ds, max size %d, connect timeout %s", tr.waitTime, tr.common.MaxMessageSize, tr.common.ConnectTimeout)
	}
}

// TestBadOptionValues: a value an option cannot use, given in code or in the URL, is an
// error naming the option and matching ErrInvalidOption (a URL's also ErrBadURL), never
// silently clamped or ignored.
func TestBadOptionValues(t *testing.T) {
	setTestCredentials(t)
	client := awssqs.New(awssqs.Options{Region: "us-east-1"})
	for name, o := range map[string]Option{
		"WithWaitTime":          WithWaitTime(21 * time.Second),
		"WithVisibilityTimeout": WithVisibilityTimeout(-time.Second),
		"WithMaxMessageSize":    WithMaxMessageSize(MaxMessageSize + 1),
		"WithConnectTimeout":    WithConnectTimeout(0),
		"WithGroupID":           WithGroupID("has space"),
		"WithQueueURLPrefix":    WithQueueURLPrefix("queues"),
	} {
		tr, err := New(client, o)
		var oe *driverkit.OptionError
		if tr != nil || !errors.Is(err, babelqueue.ErrInvalidOption) || !errors.As(err, &oe) || oe.Option != name {
			t.Errorf("New with a bad %s = %v, %v; want an error naming it, matching ErrInvalidOption", name, tr, err)
		}
	}
	for _, bad := range []Option{WithWaitTime(-1), WithMaxMessageSize(0)} {
		if _, err := Open(context.Background(), "sqs://us-east-1?endpoint=http://"+closedAddr(t), bad); !errors.Is(err, babelqueue.ErrInvalidOption) {
			t.Errorf("Open with a bad option = %v, want ErrInvalidOption before any call", err)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	if tr, err := New(client, WithWaitTime(0), WithVisibilityTimeout(0), WithGroupID(""), WithMaxMessageSize(1)); err != nil || tr.waitTime != 0 || tr.common.MaxMessageSize != 1 {
		t.Errorf("New with values at their bounds = %v", err)
	}
	for _, raw := range []string{"sqs://us-east-1?wait_time=21", "sqs://us-east-1?group_id=has%20space", "sqs://us-east-1?endpoint=ftp://x"} {
		if _, err := Open(context.Background(), raw); !errors.Is(err, babelqueue.ErrInvalidOption) || !errors.Is(err, transport.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption and ErrBadURL", raw, err)
		}
	}
}
