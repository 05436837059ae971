package pulsar_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		raw  string
		want pulsar.Config
	}{
		{"pulsar://127.0.0.1:6650", pulsar.Config{ServiceURL: "pulsar://127.0.0.1:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
		{"pulsar://localhost", pulsar.Config{ServiceURL: "pulsar://localhost:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
		{"pulsar+ssl://broker.example", pulsar.Config{ServiceURL: "pulsar+ssl://broker.example:6651", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
		{"PULSAR://h1:6650,h2:6651/", pulsar.Config{ServiceURL: "pulsar://h1:6650,h2:6651", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
		{"pulsar://[::1]:6650?subscription=billing&subscription_type=key_shared", pulsar.Config{ServiceURL: "pulsar://[::1]:6650", Subscription: "billing", SubscriptionType: pulsar.KeyShared}},
		{"pulsar://h?subscription_type=Exclusive", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Exclusive}},
		{"pulsar://h?subscription_type=failover", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Failover}},
		{"pulsar://h?subscription_type=shared", pulsar.Config{ServiceURL: "pulsar://h:6650", Subscription: "babelqueue", SubscriptionType: pulsar.Shared}},
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
			if strings.Contains(err.Error(), "s3cr3t-pw") {
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
}

func TestOpenNeedsNoBroker(t *testing.T) {
	// The client connects lazily: opening a URL whose broker is not there succeeds, and
	// the first write reports the failure.
	tr, err := transport.Open(context.Background(), "pulsar://127.0.0.1:1?subscription=x")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	c := tr.Capabilities()
	if c.Attempts != transport.AttemptsMaxNative || !c.Delay || c.DeadLetterSuffix != ".dlq" || c.HandOff || c.SchemaGate {
		t.Errorf("Capabilities = %+v", c)
	}
}

func TestDelayOnlyOnSharedSubscriptions(t *testing.T) {
	for typ, want := range map[string]bool{"shared": true, "key_shared": true, "exclusive": false, "failover": false} {
		tr, err := transport.Open(context.Background(), "pulsar://127.0.0.1:1?subscription_type="+typ)
		if err != nil {
			t.Fatalf("Open(%s): %v", typ, err)
		}
		if got := tr.Capabilities().Delay; got != want {
			t.Errorf("%s: Capabilities().Delay = %v, want %v", typ, got, want)
		}
		_ = tr.Close(context.Background())
	}
}

func TestNewNeedsClient(t *testing.T) {
	if _, err := pulsar.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
