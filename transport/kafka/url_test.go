package kafka

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url   string
		seeds []string
	}{
		{"kafka://127.0.0.1:9092", []string{"127.0.0.1:9092"}},
		{"kafka://broker", []string{"broker:9092"}},
		{"kafka://a:1,b,c:3", []string{"a:1", "b:9092", "c:3"}},
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
	u, _ := url.Parse("kafka://h:9092?group=g&delivery_timeout=2.5&auto_create_topics=0")
	s, err := parseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaults()
	for _, o := range s.opts {
		o(&cfg)
	}
	if cfg.group != "g" || cfg.deliveryTimeout != 2500*time.Millisecond || cfg.autoCreate {
		t.Errorf("options from the URL: %+v", cfg)
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
		{"kafka://u:s3cr3t@h:99999", "host"},
		{"kafka://u:s3cr3t@h:0", "host"},
		{"kafka://u:s3cr3t@h:9092,", ""}, // rejected by url.Parse itself
		{"kafka://u:s3cr3t@h:9092,,k:1", "host"},
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

// TestOpenUnreachable checks that Open fails, without the password, when no broker
// answers.
func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := transport.Open(ctx, "kafka://u:s3cr3t@127.0.0.1:1")
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error echoes the password: %v", err)
	}
}

func TestParseAttempts(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		okay bool
	}{
		{"0", 0, true}, {"3", 3, true}, {" 4\t", 4, true}, {"+2", 2, true}, {"-1", -1, true},
		{"1_0", 10, true}, {"", 0, false}, {" ", 0, false}, {"x", 0, false}, {"1.0", 0, false},
		{"_1", 0, false}, {"1__0", 0, false}, {"1_", 0, false}, {"\xff1", 0, false},
		{"99999999999999999999999", 1 << 31, true},
	}
	for _, c := range cases {
		n, ok := parseAttempts([]byte(c.in))
		if n != c.n || ok != c.okay {
			t.Errorf("parseAttempts(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.okay)
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
