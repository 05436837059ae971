package servicebus

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Every client built here targets a loopback address, and the SDK connects lazily:
// nothing in this file opens a connection.

const (
	testKey  = "c3VwZXItc2VjcmV0LXNoYXJlZC1hY2Nlc3Mta2V5LTQy" // fake SharedAccessKey
	loopback = "127.0.0.1:5671"
)

func loopbackConnString() string {
	return "Endpoint=sb://" + loopback + "/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" + testKey
}

func TestParseURL(t *testing.T) {
	good := []struct {
		raw        string
		ns         string
		renewEvery time.Duration
		maxRenewal time.Duration
	}{
		{"sb://myns.servicebus.windows.net", "myns.servicebus.windows.net", 0, 0},
		{"sb://myns.servicebus.windows.net/", "myns.servicebus.windows.net", 0, 0},
		{"SB://MyNs.ServiceBus.Windows.Net", "MyNs.ServiceBus.Windows.Net", 0, 0},
		{"sb://myns.servicebus.chinacloudapi.cn", "myns.servicebus.chinacloudapi.cn", 0, 0},
		{"sb://localhost:5672", "localhost:5672", 0, 0},
		{"sb://myns.servicebus.windows.net?lock_renewal=off", "myns.servicebus.windows.net", -1, 0},
		{"sb://myns.servicebus.windows.net?lock_renewal=auto", "myns.servicebus.windows.net", 0, 0},
		{"sb://myns.servicebus.windows.net?lock_renewal=20s&max_lock_renewal=5m", "myns.servicebus.windows.net", 20 * time.Second, 5 * time.Minute},
		{"sb://myns.servicebus.windows.net?lock_renewal=20&max_lock_renewal=1.5", "myns.servicebus.windows.net", 20 * time.Second, 1500 * time.Millisecond},
		{"sb://", "", 0, 0}, // only valid with a connection string (checked in Open)
	}
	for _, g := range good {
		u, err := url.Parse(g.raw)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := parseURL(u)
		if err != nil {
			t.Errorf("parseURL(%q): %v", g.raw, err)
			continue
		}
		if cfg := newConfig(uc.opts); uc.namespace != g.ns || cfg.renewEvery != g.renewEvery || cfg.maxRenewal != g.maxRenewal {
			t.Errorf("parseURL(%q) = %q, renew %v, max %v; want namespace %q, renew %v, max %v", g.raw, uc.namespace, cfg.renewEvery, cfg.maxRenewal, g.ns, g.renewEvery, g.maxRenewal)
		}
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	const secret = "s3cr3t-P4ss"
	bad := []struct{ raw, param string }{
		{"sb://myns.servicebus.windows.net/orders", "path"},
		{"sb://user:" + secret + "@myns.servicebus.windows.net", "userinfo"},
		{"sb://myns.servicebus.windows.net?prefetch=10", "prefetch"},
		{"sb://myns.servicebus.windows.net?SharedAccessKey=" + secret, "SharedAccessKey"},
		{"sb://myns.servicebus.windows.net?connection_string=Endpoint%3Dsb%3A%2F%2Fx%2F%3BSharedAccessKey%3D" + secret, "connection_string"},
		{"sb://myns.servicebus.windows.net?lock_renewal=soon", "lock_renewal"},
		{"sb://myns.servicebus.windows.net?lock_renewal=-5s", "lock_renewal"},
		{"sb://myns.servicebus.windows.net?lock_renewal=1s&lock_renewal=2s", "lock_renewal"},
		{"sb://myns.servicebus.windows.net?max_lock_renewal=forever", "max_lock_renewal"},
		{"sb://myns.servicebus.windows.net?max_lock_renewal=-1m", "max_lock_renewal"},
		{"sb://myns.servicebus.windows.net?connect_timeout=0", "connect_timeout"},
		{"sb://myns.servicebus.windows.net?connect_timeout=later", "connect_timeout"},
		{"sb://myns.servicebus.windows.net?max_message_size=100", "max_message_size"},
		{"sb://myns.servicebus.windows.net?max_message_size=1MB", "max_message_size"},
		{"sb://myns.servicebus.windows.net#frag", "fragment"},
		{"sb://myns", "host"},
		{"sb://myns.servicebus.windows.net:99999", "port"},
		{"sb://myns.servicebus.windows.net:", "port"},
		{"sb://", "host"}, // no namespace and no connection string
		{"sb:myns.servicebus.windows.net", "url"},
	}
	for _, b := range bad {
		_, err := transport.Open(context.Background(), b.raw)
		if err == nil {
			t.Errorf("Open(%q) succeeded, want an error naming %q", b.raw, b.param)
			continue
		}
		var bu *transport.BadURLError
		if !errors.As(err, &bu) || !errors.Is(err, transport.ErrBadURL) {
			t.Errorf("Open(%q) = %v (%T), want a *transport.BadURLError", b.raw, err, err)
			continue
		}
		if bu.Param != b.param || bu.Scheme != "sb" {
			t.Errorf("Open(%q) names %q (scheme %q), want %q: %v", b.raw, bu.Param, bu.Scheme, b.param, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q) echoed the secret: %v", b.raw, err)
		}
	}
	// A URL that does not parse at all.
	_, err := Open(context.Background(), "sb://my ns\x7f.servicebus.windows.net")
	if !errors.Is(err, transport.ErrBadURL) {
		t.Errorf("Open of an unparsable URL = %v, want ErrBadURL", err)
	}
}

// TestOpenDefaultCredential builds the SDK client behind an sb:// URL with
// DefaultAzureCredential through the scheme registry (no connection is made).
func TestOpenDefaultCredential(t *testing.T) {
	tr, err := transport.Open(context.Background(), "sb://127.0.0.1?lock_renewal=30&max_lock_renewal=10m&connect_timeout=3s&max_message_size=1048576")
	if err != nil {
		t.Fatalf("transport.Open: %v", err)
	}
	st, ok := tr.(*Transport)
	if !ok {
		t.Fatalf("transport.Open returned %T", tr)
	}
	if st.cfg.renewEvery != 30*time.Second || st.cfg.maxRenewal != 10*time.Minute || st.cfg.ConnectTimeout != 3*time.Second || st.cfg.MaxMessageSize != 1<<20 {
		t.Errorf("query parameters not applied: renew %v, max %v, connect %v, max size %d", st.cfg.renewEvery, st.cfg.maxRenewal, st.cfg.ConnectTimeout, st.cfg.MaxMessageSize)
	}
	ns, ok := st.ns.(sdkNamespace)
	if !ok || ns.client == nil || !ns.owned {
		t.Errorf("Open did not build and own an SDK client: %#v", st.ns)
	}
	c := st.Capabilities()
	if c.Attempts != transport.AttemptsMaxNative || !c.Delay || !c.HandOff || !c.SchemaGate || !c.SchemaGateAcceptsInteger || c.DeadLetterSuffix != ".dlq" {
		t.Errorf("Capabilities = %+v", c)
	}
	if err := tr.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := tr.Publish(context.Background(), &transport.Message{Queue: "q", Body: []byte("{}")}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestOpenWithConnectionString(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{"sb://", "sb://" + loopback, "sb://" + loopback + "/"} {
		tr, err := Open(ctx, raw, WithConnectionString(loopbackConnString()))
		if err != nil {
			t.Errorf("Open(%q, connection string): %v", raw, err)
			continue
		}
		if _, ok := tr.ns.(sdkNamespace); !ok {
			t.Errorf("no SDK client behind %q", raw)
		}
		_ = tr.Close(ctx)
	}

	// A URL host that is not the connection string's endpoint.
	_, err := Open(ctx, "sb://other.servicebus.windows.net", WithConnectionString(loopbackConnString()))
	var bu *transport.BadURLError
	if !errors.As(err, &bu) || bu.Param != "host" {
		t.Errorf("mismatched host: %v, want a BadURLError naming host", err)
	}
	if err != nil && strings.Contains(err.Error(), testKey) {
		t.Errorf("error echoes the SharedAccessKey: %v", err)
	}
}

func TestConnectionStringErrorsNeverEchoTheSecret(t *testing.T) {
	bad := []string{
		"SharedAccessKey=" + testKey,                                 // no endpoint
		"Endpoint=sb://" + loopback + "/;SharedAccessKey=" + testKey, // no key name (the SDK says so)
		"Endpoint=sb://" + loopback + "/;SharedAccessKeyName=k",      // no key (the SDK says so)
		"Endpoint=::not a url::;SharedAccessKey=" + testKey,          // endpoint not a URL
		"Endpoint=sb://" + loopback + "/;" + testKey,                 // a part without '='
	}
	for _, cs := range bad {
		_, err := Open(context.Background(), "sb://", WithConnectionString(cs))
		if err == nil {
			t.Errorf("connection string %q accepted", strings.ReplaceAll(cs, testKey, "KEY"))
			continue
		}
		if !errors.Is(err, ErrConnectionString) {
			t.Errorf("error %v does not match ErrConnectionString", err)
		}
		if strings.Contains(err.Error(), testKey) {
			t.Errorf("error echoes the secret: %v", err)
		}
	}
}

func TestScrubRemovesSecretsFromSDKErrors(t *testing.T) {
	pc, err := parseConnString("Endpoint=sb://" + loopback + "/;SharedAccessKeyName=n;SharedAccessKey=" + testKey)
	if err != nil {
		t.Fatal(err)
	}
	if pc.endpointHost != loopback {
		t.Errorf("endpoint host = %q", pc.endpointHost)
	}
	if got := pc.scrub("the SDK said: " + testKey + "!"); strings.Contains(got, testKey) || !strings.Contains(got, "xxxxx") {
		t.Errorf("scrub = %q", got)
	}
}

func TestNewAroundUserClient(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	client, err := azservicebus.NewClientFromConnectionString(loopbackConnString(), nil)
	if err != nil {
		t.Fatalf("the SDK rejected a well-formed loopback connection string: %v", err)
	}
	tr, err := New(client, WithLockRenewal(-1))
	if err != nil {
		t.Fatal(err)
	}
	ns := tr.ns.(sdkNamespace)
	if ns.client != client || ns.owned {
		t.Errorf("New must wrap the given client without owning it: %#v", ns)
	}
	if tr.cfg.renewEvery != -1 {
		t.Errorf("option not applied")
	}
	if err := tr.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	// The client stays the user's: it still builds senders after the transport closed.
	if _, err := client.NewSender("orders", nil); err != nil {
		t.Errorf("the user's client was closed by the transport: %v", err)
	}
	_ = client.Close(context.Background())
}

// TestBadOptionValues: a value an option cannot use, in code or in the URL, is an error
// naming the option and matching ErrInvalidOption (a URL's also ErrBadURL), where it
// was ignored.
func TestBadOptionValues(t *testing.T) {
	client, err := azservicebus.NewClientFromConnectionString(loopbackConnString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	for name, o := range map[string]Option{
		"WithConnectTimeout":  WithConnectTimeout(0),
		"WithMaxMessageSize":  WithMaxMessageSize(-1),
		"WithMaxLockRenewal":  WithMaxLockRenewal(-time.Minute),
		"WithMaxMessageSize ": WithMaxMessageSize(maxMessageSizeLimit + 1),
	} {
		tr, err := New(client, o)
		var oe *driverkit.OptionError
		if tr != nil || !errors.Is(err, babelqueue.ErrInvalidOption) || !errors.As(err, &oe) || oe.Option != strings.TrimSpace(name) {
			t.Errorf("New with a bad %s = %v, %v; want an error naming it, matching ErrInvalidOption", name, tr, err)
		}
		if _, err := Open(context.Background(), "sb://", WithConnectionString(loopbackConnString()), o); !errors.Is(err, babelqueue.ErrInvalidOption) {
			t.Errorf("Open with a bad %s = %v, want ErrInvalidOption", name, err)
		}
	}
	for _, raw := range []string{"sb://myns.servicebus.windows.net?lock_renewal=soon", "sb://myns.servicebus.windows.net?connect_timeout=0"} {
		if _, err := transport.Open(context.Background(), raw); !errors.Is(err, babelqueue.ErrInvalidOption) || !errors.Is(err, transport.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption and ErrBadURL", raw, err)
		}
	}
}
