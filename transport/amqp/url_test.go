package amqp

import (
	"context"
	"errors"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func TestURLErrorsNameTheParameter(t *testing.T) {
	cases := []struct {
		url   string
		param string
	}{
		{"amqp://guest:s3cret@127.0.0.1:5672/?bogus=1", "bogus"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?heartbeat=ten", "heartbeat"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?heartbeat=70000", "heartbeat"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?connection_timeout=-5", "connection_timeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?connection_timeout=0", "connection_timeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?connect_timeout=0s", "connect_timeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?max_message_size=12", "max_message_size"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?channel_max=x", "channel_max"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?auth_mechanism=kerberos", "auth_mechanism"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?publish_confirms=perhaps", "publish_confirms"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?declare=maybe", "declare"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?confirm_timeout=soon", "confirm_timeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?confirm_timeout=-1s", "confirm_timeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?heartbeat=1&heartbeat=2", "heartbeat"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?certfile=/c.pem", "certfile"},
		{"amqps://guest:s3cret@127.0.0.1:5671/?certfile=/c.pem", "certfile"},
		{"amqp://guest:s3cret@127.0.0.1:99999/", "port"},
		{"amqp://guest:s3cret@127.0.0.1:0/", "port"},
		{"amqp://guest:s3cret@127.0.0.1:5672/a/b", "vhost"},
	}
	for _, c := range cases {
		t.Run(c.param, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tr, err := transport.Open(ctx, c.url)
			if err == nil {
				_ = tr.Close(ctx)
				t.Fatalf("Open(%s) succeeded, want an error naming %q", transport.Redact(c.url), c.param)
			}
			if !errors.Is(err, transport.ErrBadURL) {
				t.Errorf("error %v does not match transport.ErrBadURL", err)
			}
			var bad *transport.BadURLError
			if !errors.As(err, &bad) || bad.Param != c.param {
				t.Errorf("error %v: want a BadURLError naming %q", err, c.param)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
}

func TestDialUnparseableURLHidesPassword(t *testing.T) {
	_, err := Dial(context.Background(), "amqp://guest:s3cret@127.0.0.1:5672/\x7f")
	if !errors.Is(err, transport.ErrBadURL) {
		t.Fatalf("err = %v, want ErrBadURL", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error echoes the password: %v", err)
	}
}

func TestURLSettings(t *testing.T) {
	u, _ := url.Parse("amqps://u:p@rabbit.example:5671/prod?heartbeat=15&connection_timeout=2500&publish_confirms=false&confirm_timeout=3s&connection_name=billing&declare=0&server_name_indication=rabbit.internal")
	s := defaultSettings()
	raw, err := parseURL(u, &s)
	if err != nil {
		t.Fatal(err)
	}
	if s.heartbeat != 15*time.Second || s.ConnectTimeout != 2500*time.Millisecond || !s.noUserConfirm ||
		s.confirmTimeout != 3*time.Second || s.connName != "billing" || !s.noDeclare {
		t.Errorf("settings from the URL: %+v", s)
	}
	cu, _ := url.Parse(raw)
	for p := range cu.Query() { // the package's own parameters and the TLS ones stay here
		if !slices.Contains(clientParams, p) {
			t.Errorf("URL handed to the client holds %s: %s", p, transport.Redact(raw))
		}
	}
	u2, _ := url.Parse("amqp://u:p@rabbit.example/?connect_timeout=4s&max_message_size=65536")
	s2 := defaultSettings()
	if raw, err := parseURL(u2, &s2); err != nil || s2.ConnectTimeout != 4*time.Second || s2.MaxMessageSize != 65536 ||
		strings.Contains(raw, "connect_timeout") || strings.Contains(raw, "max_message_size") {
		t.Errorf("connect_timeout and max_message_size from the URL: %v, %s, %d; handed on: %s", err, s2.ConnectTimeout, s2.MaxMessageSize, transport.Redact(raw))
	}
	if !strings.Contains(raw, "heartbeat=15") || !strings.Contains(raw, "/prod") {
		t.Errorf("client URL lost a client parameter or the vhost: %s", transport.Redact(raw))
	}
	// TLS parameters become the transport's own *tls.Config (driverkit.Query.TLS), not
	// amqp091's; RabbitMQ's URI names are aliases of the shared ones.
	if strings.Contains(raw, "server_name_indication") {
		t.Errorf("URL handed to the client still holds a TLS parameter: %s", transport.Redact(raw))
	}
	if s.tlsConfig == nil || s.tlsConfig.ServerName != "rabbit.internal" {
		t.Errorf("TLS configuration from the URL: %+v", s.tlsConfig)
	}
}

func TestConnectErrorHidesPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Nothing listens on port 1 of loopback.
	_, err := transport.Open(ctx, "amqp://guest:s3cret@127.0.0.1:1/?connection_timeout=2000")
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error echoes the password: %v", err)
	}
}

func TestSchemesRegistered(t *testing.T) {
	got := strings.Join(transport.Schemes(), ",")
	for _, s := range []string{"amqp", "amqps"} {
		if !strings.Contains(","+got+",", ","+s+",") {
			t.Errorf("scheme %s not registered (have %s)", s, got)
		}
	}
}

// TestAttemptsHeaderNeverPanics: x-attempts (and x-delivery-count) are read with the
// kit's one coercion of an attempts header (driverkit.Attempts): any integer type, a
// whole float or decimal text, as written, saturating at ±MaxInt; anything else is no
// header. Nothing makes the read panic.
func TestAttemptsHeaderNeverPanics(t *testing.T) {
	good := map[any]int{int8(-3): -3, int16(7): 7, int32(2): 2, int64(9): 9, uint8(4): 4, uint16(5): 5,
		uint32(6): 6, float64(3): 3, float32(8): 8, "12": 12, " 4 ": 4,
		int64(1) << 40: 1 << 40, uint64(1) << 63: math.MaxInt}
	for v, want := range good {
		var d transport.Delivery
		decode(&amqp091.Delivery{Headers: amqp091.Table{HeaderAttempts: v}}, &d)
		if !d.HasAttemptsHeader || d.AttemptsHeader != want {
			t.Errorf("x-attempts %T %v read as %d, %v; want %d", v, v, d.AttemptsHeader, d.HasAttemptsHeader, want)
		}
	}
	for _, v := range []any{nil, "x", "1.5", 1.5, true, []any{1}, map[string]any{}, "\xff\xfe", amqp091.Table{}} {
		var d transport.Delivery
		decode(&amqp091.Delivery{Headers: amqp091.Table{HeaderAttempts: v, "x-delivery-count": v}}, &d)
		if d.HasAttemptsHeader || d.Redeliveries != 0 {
			t.Errorf("x-attempts %T %v read as %d, %v (redeliveries %d); want not readable", v, v, d.AttemptsHeader, d.HasAttemptsHeader, d.Redeliveries)
		}
	}
}

// TestBadOptionValuesAreInvalidOptions: a bad value of an option, given in the URL or
// in code, is an error matching ErrInvalidOption that names the option; nothing is
// silently ignored. A bad host or port is a bad URL, not an option.
func TestBadOptionValuesAreInvalidOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct {
		url    string
		opts   []Option
		option string
	}{
		{"amqp://guest:s3cret@127.0.0.1:5672/?confirm_timeout=soon", nil, "confirm_timeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?heartbeat=ten", nil, "heartbeat"},
		{"amqp://guest:s3cret@127.0.0.1:5672/?bogus=1", nil, "bogus"},
		{"amqp://guest:s3cret@127.0.0.1:5672/", []Option{WithConfirmTimeout(0)}, "WithConfirmTimeout"},
		{"amqp://guest:s3cret@127.0.0.1:5672/", []Option{WithMaxMessageSize(-1)}, "WithMaxMessageSize"},
		{"amqp://guest:s3cret@127.0.0.1:5672/", []Option{WithHeartbeat(-time.Second)}, "WithHeartbeat"},
		{"amqp://guest:s3cret@127.0.0.1:5672/", []Option{WithConnectTimeout(0)}, "WithConnectTimeout"},
	} {
		tr, err := Dial(ctx, c.url, c.opts...)
		if err == nil {
			_ = tr.Close(ctx)
			t.Errorf("Dial(%s) with %d options succeeded, want an error naming %s", transport.Redact(c.url), len(c.opts), c.option)
			continue
		}
		var oe *driverkit.OptionError
		if !errors.Is(err, transport.ErrInvalidOption) || !errors.As(err, &oe) || oe.Option != c.option {
			t.Errorf("Dial(%s): %v; want an OptionError naming %s", transport.Redact(c.url), err, c.option)
		}
	}
	if _, err := New(rawConn(t), WithConfirmTimeout(-1)); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("New with WithConfirmTimeout(-1) = %v, want ErrInvalidOption", err)
	}
	u, _ := url.Parse("amqp://guest:s3cret@127.0.0.1:99999/")
	s := defaultSettings()
	if _, err := parseURL(u, &s); !errors.Is(err, transport.ErrBadURL) || errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("bad port: %v; want ErrBadURL, not ErrInvalidOption", err)
	}
}
