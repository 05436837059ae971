package kafka

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url   string
		seeds []string
	}{
		{"kafka://127.0.0.1:9092", []string{"127.0.0.1:9092"}},
		{"kafka://broker", []string{"broker:9092"}},
		{"kafka://a:1,b,c:3", []string{"a:1", "b:9092", "c:3"}},
		{"kafka://127.0.0.1:19192,127.0.0.1:19194,127.0.0.1:19196", []string{"127.0.0.1:19192", "127.0.0.1:19194", "127.0.0.1:19196"}},
		{"kafka://[::1]:9093/", []string{"[::1]:9093"}},
		{"kafka://h:9092?group=g&delivery_timeout=2.5&auto_create_topics=0&client_id=x&tls=1", []string{"h:9092"}},
		{"kafka://user:pw@h:9092?sasl=scram-sha-512", []string{"h:9092"}},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		s, err := parseURL(u)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if !slices.Equal(s.seeds, c.seeds) {
			t.Errorf("%s: seeds %v, want %v", c.url, s.seeds, c.seeds)
		}
	}
	u, _ := url.Parse("kafka://h:9092?group=g&delivery_timeout=2.5&auto_create_topics=0&session_timeout=6s&heartbeat_interval=500ms&dial_timeout=3&confirm=1&pipeline_settles=off&max_uncommitted=100&max_uncommitted_time=3s")
	s, err := parseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaults()
	for _, o := range s.opts {
		o(&cfg)
	}
	if cfg.group != "g" || cfg.deliveryTimeout != 2500*time.Millisecond || cfg.autoCreate ||
		cfg.sessionTimeout != 6*time.Second || cfg.heartbeatInterval != 500*time.Millisecond ||
		cfg.dialTimeout != 3*time.Second || !cfg.confirmPublish || cfg.pipelineSettles ||
		cfg.maxUncommitted != 100 || cfg.maxUncommittedTime != 3*time.Second {
		t.Errorf("options from the URL: %+v", cfg)
	}
	// The defaults: a 10 s session (fast failover after a crash), 1 s heartbeats.
	d := defaults()
	if d.sessionTimeout != 10*time.Second || d.heartbeatInterval != time.Second || d.dialTimeout != 10*time.Second ||
		d.confirmPublish || !d.pipelineSettles || d.maxUncommitted != DefaultMaxUncommitted || d.maxUncommittedTime != DefaultMaxUncommittedTime {
		t.Errorf("defaults: %+v", d)
	}
}

// TestConfirmedPublishCapability: Publish is confirmed only with ?confirm=1, and the
// capability says so.
func TestConfirmedPublishCapability(t *testing.T) {
	for _, on := range []bool{false, true} {
		tr, err := newTransport(nil, false, nil, WithConfirmedPublish(on))
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Capabilities().PublishConfirmed; got != on {
			t.Errorf("WithConfirmedPublish(%v): Capabilities().PublishConfirmed = %v", on, got)
		}
	}
}

// TestOpenRejectsBadURLs checks that Open names the faulty part and never echoes the
// password.
func TestOpenRejectsBadURLs(t *testing.T) {
	cases := []struct{ url, param string }{
		{"kafka://u:s3cr3t@h:9092?bogus=1", "bogus"},
		{"kafka://u:s3cr3t@h:9092?delivery_timeout=soon", "delivery_timeout"},
		{"kafka://u:s3cr3t@h:9092?delivery_timeout=-1s", "delivery_timeout"},
		{"kafka://u:s3cr3t@h:9092?delivery_timeout=0", "delivery_timeout"},
		{"kafka://u:s3cr3t@h:9092?auto_create_topics=maybe", "auto_create_topics"},
		{"kafka://u:s3cr3t@h:9092?group=", "group"},
		{"kafka://u:s3cr3t@h:9092?group=a&group=b", "group"},
		{"kafka://u:s3cr3t@h:9092?sasl=kerberos", "sasl"},
		{"kafka://h:9092?sasl=plain", "sasl"},
		{"kafka://u:s3cr3t@h:9092?tls=sometimes", "tls"},
		{"kafka://u:s3cr3t@h:9092?session_timeout=500ms", "session_timeout"},
		{"kafka://u:s3cr3t@h:9092?session_timeout=soon", "session_timeout"},
		{"kafka://u:s3cr3t@h:9092?session_timeout=6s&heartbeat_interval=6s", "heartbeat_interval"},
		{"kafka://u:s3cr3t@h:9092?heartbeat_interval=11s", "heartbeat_interval"}, // the default session is 10s
		{"kafka://u:s3cr3t@h:9092?heartbeat_interval=0", "heartbeat_interval"},
		{"kafka://u:s3cr3t@h:9092?dial_timeout=0", "dial_timeout"},
		{"kafka://u:s3cr3t@h:9092?confirm=perhaps", "confirm"},
		{"kafka://u:s3cr3t@h:9092?pipeline_settles=2", "pipeline_settles"},
		{"kafka://u:s3cr3t@h:9092?client_id=", "client_id"},
		{"kafka://u:s3cr3t@h:9092?max_uncommitted=0", "max_uncommitted"},
		{"kafka://u:s3cr3t@h:9092?max_uncommitted=many", "max_uncommitted"},
		{"kafka://u:s3cr3t@h:9092?max_uncommitted_time=0", "max_uncommitted_time"},
		{"kafka://u:s3cr3t@h:99999", "host"},
		{"kafka://u:s3cr3t@h:0", "host"},
		{"kafka://u:s3cr3t@h:9092,", ""}, // rejected by url.Parse itself
		{"kafka://u:s3cr3t@h:9092,,k:1", "host"},
		{"kafka://u:s3cr3t@h:x1,k:9092", "host"},
		{"kafka://u:s3cr3t@:9092", "host"},
		{"kafka://", "host"},
		{"kafka://u:s3cr3t@h:9092/orders", "path"},
		{"kafka:h:9092", "host"},
		{"kafka://:s3cr3t@h:9092", "userinfo"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tr, err := transport.Open(ctx, c.url)
		cancel()
		if err == nil {
			_ = tr.Close(context.Background())
			t.Errorf("%s: Open succeeded", c.url)
			continue
		}
		if !errors.Is(err, transport.ErrBadURL) {
			t.Errorf("%s: error %v does not match ErrBadURL", c.url, err)
		}
		var be *transport.BadURLError
		if c.param != "" && (!errors.As(err, &be) || be.Param != c.param) {
			t.Errorf("%s: error %v does not name %q", c.url, err, c.param)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error echoes the password: %v", c.url, err)
		}
	}
}

// TestOptionsValidated: an option value the transport cannot use is an error from New
// (and Open) naming the option and matching ErrInvalidOption, never ignored; a bad URL
// value matches it too.
func TestOptionsValidated(t *testing.T) {
	cases := []struct {
		option string
		opt    Option
	}{
		{"WithGroup", WithGroup("")},
		{"WithDeliveryTimeout", WithDeliveryTimeout(0)},
		{"WithSessionTimeout", WithSessionTimeout(500 * time.Millisecond)},
		{"WithHeartbeatInterval", WithHeartbeatInterval(-time.Second)},
		{"WithHeartbeatInterval", WithHeartbeatInterval(time.Minute)}, // not shorter than the 10 s session
		{"WithDialTimeout", WithDialTimeout(0)},
		{"WithMetadataRefresh", WithMetadataRefresh(100 * time.Millisecond)},
		{"WithBuffer", WithBuffer(0)},
		{"WithCommitInterval", WithCommitInterval(-time.Second)},
		{"WithMaxUncommitted", WithMaxUncommitted(0)},
		{"WithMaxUncommittedTime", WithMaxUncommittedTime(0)},
	}
	for _, c := range cases {
		_, err := newTransport(nil, false, nil, c.opt)
		var oe *driverkit.OptionError
		if !errors.Is(err, transport.ErrInvalidOption) || !errors.As(err, &oe) || oe.Option != c.option {
			t.Errorf("%s with a bad value: %v, want an OptionError naming it that matches ErrInvalidOption", c.option, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := transport.Open(ctx, "kafka://h:9092?delivery_timeout=soon"); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("a bad delivery_timeout: %v, want an error matching ErrInvalidOption", err)
	}
}

// TestOpenUnreachable checks that Open fails, without the password, when no broker
// answers: at once on a refused connection, and within the dial timeout when the port
// accepts connections but nothing answers; franz-go's own warnings go to the logger the
// runtime hands to openers, at Debug while Open checks the broker (its one error says
// what they say).
// WithLogger(nil) keeps the logger set (it made Open panic).
func TestOpenNilLogger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Open(ctx, "kafka://127.0.0.1:1?dial_timeout=200ms", WithLogger(nil)); err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
}

func TestOpenUnreachable(t *testing.T) {
	var logs transporttest.LogBuffer
	ctx := transport.ContextWithLogger(context.Background(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := transport.Open(cctx, "kafka://u:s3cr3t@127.0.0.1:1")
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error echoes the password: %v", err)
	}
	if !strings.Contains(logs.String(), "client=franz-go") || !strings.Contains(logs.String(), "unable to open connection") {
		t.Errorf("franz-go's warnings did not reach the context's logger; it holds:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("franz-go's warnings of Open's own check are not at Debug:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Errorf("the log echoes the password:\n%s", logs.String())
	}

	// A port that accepts connections and never answers: Open gives up after the dial
	// timeout, with no deadline of its own on ctx.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = transport.Open(context.Background(), "kafka://"+l.Addr().String()+"?dial_timeout=1s")
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "dial timeout (1s)") {
		t.Fatalf("Open on a silent port = %v, want an error naming the dial timeout", err)
	}
	t.Logf("Open on a silent port failed after %s: %v", took.Round(time.Millisecond), err)
}

// TestDecodeAttempts: a consumer reads the bq-attempts header as the reference SDK's
// int() does (driverkit.Attempts, the coercion every driver shares).
func TestDecodeAttempts(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		okay bool
	}{
		{"0", 0, true}, {"3", 3, true}, {" 4\t", 4, true}, {"+2", 2, true}, {"-1", -1, true},
		{"1_0", 10, true}, {"", 0, false}, {" ", 0, false}, {"x", 0, false}, {"1.0", 0, false},
		{"_1", 0, false}, {"1__0", 0, false}, {"1_", 0, false}, {"\xff1", 0, false},
		{"99999999999999999999999", math.MaxInt, true},
		{"9223372036854775807", math.MaxInt, true}, {"2147483648", 1 << 31, true},
		{"-99999999999999999999999", -math.MaxInt, true},
	}
	view := &consumer{queue: "q"}
	for _, c := range cases {
		var d transport.Delivery
		rec := &record{r: recordWithHeader(HeaderAttempts, c.in)}
		rec.decode()
		view.Decode(rec, &d)
		if n, ok := d.AttemptsHeader, d.HasAttemptsHeader; n != c.n || ok != c.okay {
			t.Errorf("bq-attempts %q read as %d, %v; want %d, %v", c.in, n, ok, c.n, c.okay)
		}
	}
}

func TestDueAtClamped(t *testing.T) {
	// Covered through the exported behaviour in TestDelay*, the clamp is checked here.
	now := time.UnixMilli(1_000_000)
	tier := 5 * time.Second
	for _, c := range []struct {
		header string
		want   time.Time
	}{
		{"1002000", time.UnixMilli(1_002_000)},
		{"9999999999", now.Add(tier)}, // producer clock ahead: at most one tier
		{"1", now},                    // overdue: now
	} {
		r := recordWithHeader(HeaderDueAt, c.header)
		if got := dueAt(r, tier, now); !got.Equal(c.want) {
			t.Errorf("due-at %s: %v, want %v", c.header, got.UnixMilli(), c.want.UnixMilli())
		}
	}
}

func recordWithHeader(k, v string) *kgo.Record {
	return &kgo.Record{Timestamp: time.UnixMilli(0), Headers: []kgo.RecordHeader{{Key: k, Value: []byte(v)}}}
}
