package artemis_test

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url      string
		addr     string
		user     string
		password string
		creds    bool
		idle     time.Duration
		tls      bool
		sni      string
		noPipe   bool
		nodes    string // every node, when the URL lists several
		connect  time.Duration
		size     int
	}{
		{url: "artemis://127.0.0.1:5673", addr: "amqp://127.0.0.1:5673"},
		{url: "artemis://broker", addr: "amqp://broker:5672"},
		{url: "ARTEMIS://broker/", addr: "amqp://broker:5672"},
		{url: "artemis+ssl://broker", addr: "amqps://broker:5671", tls: true, sni: "broker"},
		{url: "artemis+ssl://broker:5700?server_name=mq.example.org", addr: "amqps://broker:5700", tls: true, sni: "mq.example.org"},
		{url: "artemis://u:p%40ss@[::1]:5673", addr: "amqp://[::1]:5673", user: "u", password: "p@ss", creds: true},
		{url: "artemis://onlyuser@h", addr: "amqp://h:5672", user: "onlyuser", creds: true},
		{url: "artemis://h?idle_timeout=15s", addr: "amqp://h:5672", idle: 15 * time.Second},
		{url: "artemis://h?idle_timeout=0", addr: "amqp://h:5672", idle: -1},
		{url: "artemis://h?idle_timeout=30", addr: "amqp://h:5672", idle: 30 * time.Second},
		{url: "artemis://h?idle_timeout=1500ms", addr: "amqp://h:5672", idle: 1500 * time.Millisecond},
		{url: "artemis://h?pipeline_settles=0", addr: "amqp://h:5672", noPipe: true},
		{url: "artemis://h?pipeline_settles=false", addr: "amqp://h:5672", noPipe: true},
		{url: "artemis://h?pipeline_settles=1", addr: "amqp://h:5672"},
		{url: "artemis://h?connect_timeout=3s&max_message_size=65536", addr: "amqp://h:5672", connect: 3 * time.Second, size: 65536},
		{url: "artemis://u:p%40ss@h1:5681,h2:5682", addr: "amqp://h1:5681", nodes: "h1:5681 h2:5682", user: "u", password: "p@ss", creds: true},
		{url: "artemis://h1,h2:5682", addr: "amqp://h1:5672", nodes: "h1:5672 h2:5682"},
		{url: "artemis+ssl://h1:5701,h2:5702", addr: "amqps://h1:5701", nodes: "h1:5701 h2:5702", tls: true, sni: "h1"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			c, err := artemis.ParseURL(u)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			if c.Addr != tc.addr || c.Username != tc.user || c.Password != tc.password || c.HasCredentials != tc.creds || c.IdleTimeout != tc.idle {
				t.Errorf("got %+v", c)
			}
			if connect := cmp.Or(tc.connect, artemis.DefaultConnectTimeout); c.ConnectTimeout != connect || c.MaxMessageSize != tc.size {
				t.Errorf("ConnectTimeout, MaxMessageSize = %s, %d; want %s, %d", c.ConnectTimeout, c.MaxMessageSize, connect, tc.size)
			}
			if c.PipelineSettles == tc.noPipe {
				t.Errorf("PipelineSettles = %v, want %v", c.PipelineSettles, !tc.noPipe)
			}
			if (c.TLS != nil) != tc.tls {
				t.Errorf("TLS = %v, want %v", c.TLS != nil, tc.tls)
			}
			if c.TLS != nil && c.TLS.ServerName != tc.sni {
				t.Errorf("ServerName = %q, want %q", c.TLS.ServerName, tc.sni)
			}
			nodes := tc.nodes
			if nodes == "" {
				nodes = strings.TrimPrefix(strings.TrimPrefix(tc.addr, "amqp://"), "amqps://")
			}
			if got := strings.Join(c.Nodes, " "); got != nodes {
				t.Errorf("Nodes = %q, want %q", got, nodes)
			}
			if tc.nodes != "" && !strings.Contains(c.String(), strings.Split(tc.nodes, " ")[1]) {
				t.Errorf("String() = %q does not name every node", c.String())
			}
			if strings.Contains(c.String(), "p@ss") {
				t.Errorf("String() shows the password: %s", c.String())
			}
		})
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	const secret = "s3cr3t-pw"
	cases := []struct {
		url    string
		param  string
		option bool // a query parameter: also an *driverkit.OptionError matching ErrInvalidOption
	}{
		{"artemis://u:" + secret + "@h:5673?prefetch=10", "prefetch", true},
		{"artemis://u:" + secret + "@h:5673?idle_timeout=soon", "idle_timeout", true},
		{"artemis://u:" + secret + "@h:5673?idle_timeout=-3s", "idle_timeout", true},
		{"artemis://u:" + secret + "@h:5673?container_id=", "container_id", true},
		{"artemis://u:" + secret + "@h:5673?container_id=a&container_id=b", "container_id", true},
		{"artemis://u:" + secret + "@h:5673?server_name=x", "server_name", true},
		{"artemis://u:" + secret + "@h:5673?pipeline_settles=maybe", "pipeline_settles", true},
		{"artemis://u:" + secret + "@h:5673?connect_timeout=0s", "connect_timeout", true},
		{"artemis://u:" + secret + "@h:5673?max_message_size=10", "max_message_size", true},
		{"artemis://u:" + secret + "@:5673", "host", false},
		{"artemis://u:" + secret + "@h1:5673,:5674", "host", false},
		{"artemis://u:" + secret + "@h1:5673,,h2:5674", "host", false},
		{"artemis://u:" + secret + "@h1:5673,h2:99999", "host", false},
		{"artemis://u:" + secret + "@h:99999", "port", false},
		{"artemis://u:" + secret + "@h:5673/orders", "path", false},
		{"artemis://u:" + secret + "@h:5673#frag", "fragment", false},
		{"artemis:u:" + secret + "@h", "host", false},
	}
	for _, tc := range cases {
		t.Run(tc.param, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tr, err := transport.Open(ctx, tc.url)
			if err == nil {
				_ = tr.Close(ctx)
				t.Fatalf("Open(%s) succeeded", transport.Redact(tc.url))
			}
			if !errors.Is(err, transport.ErrBadURL) {
				t.Errorf("error %v does not match transport.ErrBadURL", err)
			}
			var bad *transport.BadURLError
			if !errors.As(err, &bad) || bad.Param != tc.param {
				t.Errorf("error %v: want a BadURLError naming %q", err, tc.param)
			}
			var oe *driverkit.OptionError
			if tc.option && (!errors.Is(err, transport.ErrInvalidOption) || !errors.As(err, &oe) || oe.Option != tc.param) {
				t.Errorf("error %v: want an ErrInvalidOption naming %q", err, tc.param)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
}

// A bad value given to an option function is an error from Open and New naming the
// option and matching babelqueue.ErrInvalidOption, never ignored.
func TestBadOptionValues(t *testing.T) {
	cases := []struct {
		opt  artemis.Option
		name string
	}{
		{artemis.WithConfirmTimeout(0), "WithConfirmTimeout"},
		{artemis.WithConfirmTimeout(-time.Second), "WithConfirmTimeout"},
		{artemis.WithMaxMessageSize(0), "WithMaxMessageSize"},
		{artemis.WithMaxBackoff(-1), "WithMaxBackoff"},
		{artemis.WithLogger(nil), "WithLogger"},
		{artemis.WithConnectTimeout(0), "WithConnectTimeout"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := artemis.DialURL(ctx, brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	check := func(t *testing.T, err error, name string) {
		t.Helper()
		var oe *driverkit.OptionError
		if !errors.Is(err, babelqueue.ErrInvalidOption) || !errors.As(err, &oe) || oe.Option != name || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v: want an ErrInvalidOption naming %s", err, name)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Nothing listens on port 1: the option is refused before anything is dialled.
			tr, err := artemis.Open(ctx, "artemis://127.0.0.1:1", tc.opt)
			if err == nil {
				_ = tr.Close(ctx)
			}
			check(t, err, tc.name)
			tr, err = artemis.New(conn, tc.opt)
			if err == nil {
				_ = tr.Close(ctx)
			}
			check(t, err, tc.name)
		})
	}
	if _, err := artemis.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// A broker that is not there is an error from Open that names the address and never
// the password.
func TestOpenUnreachableHidesPassword(t *testing.T) {
	const secret = "s3cr3t-pw"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there.
	_, err := transport.Open(ctx, "artemis://u:"+secret+"@127.0.0.1:1")
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error echoes the password: %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("error does not name the broker: %v", err)
	}
}

func TestCapabilities(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := artemis.Open(ctx, brokerURL(t), artemis.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(ctx) }()
	c := tr.Capabilities()
	if c.Attempts != transport.AttemptsMaxNative || !c.Delay || !c.SchemaGate || c.HandOff || c.SchemaGateAcceptsInteger {
		t.Errorf("Capabilities = %+v", c)
	}
	if got := settle.DeadLetterQueue("orders", "", "", c); got != "orders.dlq" {
		t.Errorf("DLQ of orders = %q, want orders.dlq", got)
	}
}
