package pulsar_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		raw  string
		want pulsar.Config
	}{
		{"pulsar://127.0.0.1:6650", pulsar.Config{ServiceURL: "pulsar://127.0.0.1:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true}},
		{"pulsar://localhost", pulsar.Config{ServiceURL: "pulsar://localhost:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true}},
		{"pulsar+ssl://broker.example", pulsar.Config{ServiceURL: "pulsar+ssl://broker.example:6651", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true}},
		{"PULSAR://h1:6650,h2:6651/", pulsar.Config{ServiceURL: "pulsar://h1:6650,h2:6651", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true}},
		{"pulsar://[::1]:6650?subscription=billing&subscription_type=key_shared", pulsar.Config{ServiceURL: "pulsar://[::1]:6650", Subscription: "billing", SubscriptionType: pulsar.KeyShared, PipelineSettles: true}},
		{"pulsar://h?subscription_type=Exclusive", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Exclusive, PipelineSettles: true}},
		{"pulsar://h?subscription_type=failover", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Failover, PipelineSettles: true}},
		{"pulsar://h?subscription_type=shared", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true}},
		{"pulsar://h?connect_timeout=2s&send_timeout=1m&nack_delay=250ms&max_message_size=1048576", pulsar.Config{
			ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared,
			ConnectTimeout: 2 * time.Second, SendTimeout: time.Minute, NackDelay: 250 * time.Millisecond, MaxMessageSize: 1 << 20,
			PipelineSettles: true,
		}},
		// A bare number is seconds, as on every driver.
		{"pulsar://h?connect_timeout=3&nack_delay=0.5", pulsar.Config{
			ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared,
			ConnectTimeout: 3 * time.Second, NackDelay: 500 * time.Millisecond, PipelineSettles: true,
		}},
		// pipeline_settles: on by default, 0 (or false, off, no) turns it off.
		{"pulsar://h?pipeline_settles=0", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
		{"pulsar://h?pipeline_settles=off", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
		{"pulsar://h?pipeline_settles=1", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true}},
		{"pulsar://h?receiver_queue=1", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true, ReceiverQueueSize: 1}},
		// token authentication: the JWT itself, or the file holding it.
		{"pulsar+ssl://h?token_file=/etc/bq/pulsar.token", pulsar.Config{ServiceURL: "pulsar+ssl://h:6651", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true, TokenFile: "/etc/bq/pulsar.token"}},
		{"pulsar://h?token=eyJ.x.y", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared, PipelineSettles: true, Token: "eyJ.x.y"}},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			u, err := url.Parse(c.raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pulsar.ParseURL(u)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			// TLS is the shared grammar's *tls.Config (driverkit.Query.TLS): set exactly for pulsar+ssl://.
			if secure := strings.HasPrefix(c.raw, "pulsar+ssl://"); (got.TLS != nil) != secure {
				t.Errorf("ParseURL TLS = %v for %s", got.TLS, c.raw)
			}
			got.TLS = nil
			if got != c.want {
				t.Errorf("ParseURL = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	cases := []struct {
		raw, param string
	}{
		{"pulsar://h:6650?queue=orders", "queue"},
		{"pulsar://h:6650?subscription=a&bogus=1", "bogus"},
		{"pulsar://h:6650?subscription=", "subscription"},
		{"pulsar://h:6650?subscription=a&subscription=b", "subscription"},
		{"pulsar://h:6650?subscription_type=round_robin", "subscription_type"},
		{"pulsar://h:6650?subscription_type=", "subscription_type"},
		{"pulsar://h:0", "port"},
		{"pulsar://h:99999", "port"},
		{"pulsar://:6650", "host"},
		{"pulsar://", "host"},
		{"pulsar:opaque", "host"},
		{"pulsar://h:6650/public/default", "path"},
		{"pulsar://h:6650#frag", "fragment"},
		{"pulsar://admin:s3cr3t-pw@h:6650", "user"},
		{"pulsar://h:6650,,h2:6650", "host"},
		{"pulsar://h:6650?connect_timeout=soon", "connect_timeout"},
		{"pulsar://h:6650?connect_timeout=-1s", "connect_timeout"},
		{"pulsar://h:6650?connect_timeout=0", "connect_timeout"},
		{"pulsar://h:6650?send_timeout=1fortnight", "send_timeout"},
		{"pulsar://h:6650?nack_delay=0s", "nack_delay"},
		{"pulsar://h:6650?nack_delay=", "nack_delay"},
		{"pulsar://h:6650?max_message_size=0", "max_message_size"},
		{"pulsar://h:6650?max_message_size=5MB", "max_message_size"},
		{"pulsar://h:6650?pipeline_settles=maybe", "pipeline_settles"},
		{"pulsar://h:6650?pipeline_settles=", "pipeline_settles"},
		{"pulsar://h:6650?pipeline_settles=1&pipeline_settles=0", "pipeline_settles"},
		{"pulsar://h:6650?receiver_queue=0", "receiver_queue"},
		{"pulsar://h:6650?receiver_queue=lots", "receiver_queue"},
		{"pulsar://h:6650?admin=ftp://h:21", "admin"},
		{"pulsar://h:6650?tls_ca=/ca.pem", "tls_ca"},
		{"pulsar+ssl://h:6651?tls_ca=/nonexistent/ca.pem", "tls_ca"},
		{"pulsar://h:6650?token=", "token"},
		{"pulsar://h:6650?token=a&token_file=/t", "token"},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			tr, err := transport.Open(context.Background(), c.raw)
			if err == nil {
				_ = tr.Close(context.Background())
				t.Fatalf("Open(%q) succeeded", c.raw)
			}
			if !errors.Is(err, transport.ErrBadURL) {
				t.Errorf("error %v does not match transport.ErrBadURL", err)
			}
			var bad *transport.BadURLError
			if !errors.As(err, &bad) {
				t.Fatalf("error %v is not a *transport.BadURLError", err)
			}
			if bad.Param != c.param {
				t.Errorf("error names %q, want %q: %v", bad.Param, c.param, err)
			}
			if isParam := c.param != "scheme" && c.param != "host" && c.param != "port" && c.param != "path" && c.param != "fragment" && c.param != "user"; isParam && !errors.Is(err, babelqueue.ErrInvalidOption) {
				t.Errorf("error %v of a bad parameter does not match babelqueue.ErrInvalidOption", err)
			}
			if strings.Contains(err.Error(), "s3cr3t-pw") {
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
}

// newLazy builds a transport around a client that has not connected to anything (the
// Pulsar client connects on the first producer or consumer).
func newLazy(t *testing.T, opts ...pulsar.Option) *pulsar.Transport {
	t.Helper()
	client, err := pc.NewClient(pc.ClientOptions{URL: "pulsar://127.0.0.1:1", Logger: silentPulsarLog()})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := pulsar.New(client, append(opts, pulsar.WithCloseClient())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

func TestCapabilities(t *testing.T) {
	c := newLazy(t).Capabilities()
	if c.Attempts != transport.AttemptsMaxNative || !c.Delay || c.DeadLetterSuffix != ".dlq" || c.HandOff || c.SchemaGate || !c.PublishConfirmed {
		t.Errorf("Capabilities = %+v", c)
	}
}

func TestDelayOnlyOnSharedSubscriptions(t *testing.T) {
	for typ, want := range map[pulsar.SubscriptionType]bool{pulsar.Shared: true, pulsar.KeyShared: true, pulsar.Exclusive: false, pulsar.Failover: false} {
		if got := newLazy(t, pulsar.WithSubscriptionType(typ)).Capabilities().Delay; got != want {
			t.Errorf("%s: Capabilities().Delay = %v, want %v", typ, got, want)
		}
	}
}

// Options whose value the transport cannot work with are refused, not ignored: the
// error names the option and matches babelqueue.ErrInvalidOption, from New and from
// OpenURL alike.
func TestNewRefusesBadOptions(t *testing.T) {
	client, err := pc.NewClient(pc.ClientOptions{URL: "pulsar://127.0.0.1:1", Logger: silentPulsarLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for name, o := range map[string]pulsar.Option{
		"WithNackRedeliveryDelay": pulsar.WithNackRedeliveryDelay(-time.Second),
		"WithSendTimeout":         pulsar.WithSendTimeout(0),
		"WithConnectTimeout":      pulsar.WithConnectTimeout(-1),
		"WithMaxMessageSize":      pulsar.WithMaxMessageSize(-1),
		"WithSubscriptionType":    pulsar.WithSubscriptionType("round_robin"),
		"WithSubscription":        pulsar.WithSubscription(""),
		"WithReceiverQueueSize":   pulsar.WithReceiverQueueSize(0),
		"WithAdminURL":            pulsar.WithAdminURL("localhost:8080"),
	} {
		tr, err := pulsar.New(client, o)
		if err == nil {
			_ = tr.Close(context.Background())
			t.Errorf("New with a bad %s succeeded", name)
			continue
		}
		if !errors.Is(err, babelqueue.ErrInvalidOption) || !strings.Contains(err.Error(), name) {
			t.Errorf("New with a bad %s = %v, want an error naming it that matches ErrInvalidOption", name, err)
		}
		u, _ := url.Parse("pulsar://127.0.0.1:1")
		if _, err := pulsar.OpenURL(context.Background(), u, o); !errors.Is(err, babelqueue.ErrInvalidOption) {
			t.Errorf("OpenURL with a bad %s = %v, want ErrInvalidOption before it dials", name, err)
		}
	}
}

func TestNewNeedsClient(t *testing.T) {
	if _, err := pulsar.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
