package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/babelqueue-go/babelqueue/transport"
)

func init() {
	transport.Register("kafka", func(ctx context.Context, u *url.URL) (transport.Transport, error) {
		return OpenURL(ctx, u)
	})
}

// urlParams are the query parameters a kafka:// URL accepts.
var urlParams = []string{"group", "delivery_timeout", "auto_create_topics", "client_id", "tls", "sasl"}

// settings is what a kafka:// URL says.
type settings struct {
	seeds []string
	base  []kgo.Opt // client options shared by the producer and the consumers
	opts  []Option
}

func bad(param, reason string) error {
	return &transport.BadURLError{Scheme: "kafka", Param: param, Reason: reason}
}

// parseURL reads a kafka:// URL. Errors are *transport.BadURLError values that name the
// offending part and never echo a password.
func parseURL(u *url.URL) (*settings, error) {
	if !strings.EqualFold(u.Scheme, "kafka") {
		return nil, bad("scheme", fmt.Sprintf("want kafka://, got %q", u.Scheme+"://"))
	}
	if u.Opaque != "" {
		return nil, bad("host", "want kafka://host:port[,host:port]")
	}
	if err := transport.CheckParams(u, urlParams...); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, bad("path", "kafka:// takes no path (the queue is the topic)")
	}
	if u.Fragment != "" {
		return nil, bad("fragment", "kafka:// takes no fragment")
	}
	s := &settings{}
	if u.Host == "" {
		return nil, bad("host", "no broker address (want kafka://host:port[,host:port])")
	}
	for _, hp := range strings.Split(u.Host, ",") {
		if hp == "" {
			return nil, bad("host", "empty broker address in the list")
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			// No port: the Kafka default.
			if strings.Contains(err.Error(), "missing port") {
				host, port = hp, "9092"
				if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
					host = host[1 : len(host)-1]
				}
			} else {
				return nil, bad("host", fmt.Sprintf("broker address %q: want host:port", hp))
			}
		}
		if host == "" {
			return nil, bad("host", fmt.Sprintf("broker address %q has no host", hp))
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, bad("host", fmt.Sprintf("broker address %q: port must be 1-65535", hp))
		}
		s.seeds = append(s.seeds, net.JoinHostPort(host, port))
	}
	q := u.Query()
	for k, vs := range q {
		if len(vs) > 1 {
			return nil, bad(k, "given more than once")
		}
	}
	clientID := "babelqueue-go"
	if q.Has("client_id") {
		clientID = q.Get("client_id")
		if clientID == "" {
			return nil, bad("client_id", "empty")
		}
	}
	s.base = append(s.base, kgo.SeedBrokers(s.seeds...), kgo.ClientID(clientID))
	if q.Has("group") {
		g := q.Get("group")
		if g == "" {
			return nil, bad("group", "empty consumer group name")
		}
		s.opts = append(s.opts, WithGroup(g))
	}
	if q.Has("delivery_timeout") {
		d, err := parseDuration(q.Get("delivery_timeout"))
		if err != nil {
			return nil, bad("delivery_timeout", err.Error())
		}
		s.opts = append(s.opts, WithDeliveryTimeout(d))
	}
	if q.Has("auto_create_topics") {
		on, err := parseBool(q.Get("auto_create_topics"))
		if err != nil {
			return nil, bad("auto_create_topics", err.Error())
		}
		s.opts = append(s.opts, WithAutoCreateTopics(on))
	}
	if q.Has("tls") {
		on, err := parseBool(q.Get("tls"))
		if err != nil {
			return nil, bad("tls", err.Error())
		}
		if on {
			s.base = append(s.base, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
		}
	}
	mech := strings.ToLower(q.Get("sasl"))
	if q.Has("sasl") && u.User == nil {
		return nil, bad("sasl", "needs a user and password in the URL (kafka://user:password@host:port)")
	}
	if u.User != nil {
		user := u.User.Username()
		pass, _ := u.User.Password()
		if user == "" {
			return nil, bad("userinfo", "empty SASL user name")
		}
		switch mech {
		case "", "plain":
			s.base = append(s.base, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case "scram-sha-256":
			s.base = append(s.base, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case "scram-sha-512":
			s.base = append(s.base, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		default:
			return nil, bad("sasl", "want plain, scram-sha-256 or scram-sha-512")
		}
	}
	return s, nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || f != f {
			return 0, fmt.Errorf("want a duration such as 30s or a number of seconds, got %q", v)
		}
		if f > float64(24*time.Hour/time.Second) {
			return 0, fmt.Errorf("%q is longer than a day", v)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", v)
	}
	return d, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want true or false (1 or 0), got %q", v)
}

// OpenURL builds a transport from a parsed kafka:// URL: it creates the producer, checks
// that a broker answers within ctx, and returns the transport. [transport.Open] calls it
// for kafka:// URLs.
func OpenURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	all := append(s.opts, opts...)
	cfg := defaults()
	for _, o := range all {
		o(&cfg)
	}
	popts := append([]kgo.Opt{}, s.base...)
	if cfg.autoCreate {
		popts = append(popts, kgo.AllowAutoTopicCreation())
	}
	popts = append(popts, kgo.MetadataMinAge(250*time.Millisecond))
	prod, err := kgo.NewClient(popts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: building the producer for %s: %w", transport.RedactURL(u), err)
	}
	if err := prod.Ping(ctx); err != nil {
		prod.Close()
		return nil, fmt.Errorf("kafka: no broker of %s answers: %w", transport.RedactURL(u), err)
	}
	t, err := newTransport(prod, true, Factory(s.base...), all...)
	if err != nil {
		prod.Close()
		return nil, err
	}
	return t, nil
}

// Open builds a transport from a kafka:// URL string (see the package documentation for
// its parameters).
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, bad("url", "cannot parse "+transport.Redact(rawURL))
	}
	return OpenURL(ctx, u, opts...)
}
