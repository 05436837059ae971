package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func init() {
	transport.Register("kafka", func(ctx context.Context, u *url.URL) (transport.Transport, error) {
		return OpenURL(ctx, u)
	})
}

// urlOptions are the query parameters of a kafka:// URL that set an [Option].
var urlOptions = driverkit.Params[Option]{
	{Name: "group", String: WithGroup},
	{Name: "delivery_timeout", Duration: WithDeliveryTimeout, Lo: time.Millisecond, Hi: 24 * time.Hour},
	{Name: "session_timeout", Duration: WithSessionTimeout, Lo: time.Second, Hi: time.Hour},
	{Name: "heartbeat_interval", Duration: WithHeartbeatInterval, Lo: time.Millisecond, Hi: time.Hour},
	{Name: "dial_timeout", Duration: WithDialTimeout, Lo: time.Millisecond, Hi: time.Hour},
	{Name: "max_uncommitted_time", Duration: WithMaxUncommittedTime, Lo: time.Millisecond, Hi: time.Hour},
	{Name: "max_uncommitted", Int: WithMaxUncommitted, Min: 1, Max: math.MaxInt32},
	{Name: "auto_create_topics", Bool: WithAutoCreateTopics},
	{Name: "confirm", Bool: WithConfirmedPublish},
	{Name: "pipeline_settles", Bool: WithPipelinedSettles},
}

// urlParams are the query parameters a kafka:// URL accepts.
var urlParams = slices.Concat(urlOptions.Names(), []string{"client_id", "tls", "sasl"}, transport.TLSParams)

// settings is what a kafka:// URL says.
type settings struct {
	tls   *tls.Config // from tls=1 and the TLS parameters; nil without TLS
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
	if err := driverkit.RefuseParts("kafka", u, driverkit.URLPart{Part: "opaque", Param: "host", Reason: "want kafka://host:port[,host:port]"}); err != nil {
		return nil, err
	}
	q, err := driverkit.ParseQuery("kafka", u, urlParams...)
	if err != nil {
		return nil, err
	}
	if err := driverkit.RefuseParts("kafka", u, driverkit.URLPart{Part: "path", Param: "path", Reason: "kafka:// takes no path (the queue is the topic)"},
		driverkit.URLPart{Part: "fragment", Param: "fragment", Reason: "kafka:// takes no fragment"}); err != nil {
		return nil, err
	}
	s := &settings{}
	if u.Host == "" {
		return nil, bad("host", "no broker address (want kafka://host:port[,host:port])")
	}
	if s.seeds, err = driverkit.Hosts(u, "9092"); err != nil {
		return nil, bad("host", err.Error())
	}
	clientID, ok, err := q.NonEmpty("client_id")
	if err != nil {
		return nil, err
	}
	if !ok {
		clientID = "babelqueue-go"
	}
	s.base = append(s.base, kgo.SeedBrokers(s.seeds...), kgo.ClientID(clientID))
	if s.opts, err = urlOptions.Read(q); err != nil {
		return nil, err
	}
	if cfg := newConfig(s.opts); cfg.heartbeatInterval >= cfg.sessionTimeout {
		return nil, q.Bad("heartbeat_interval", fmt.Sprintf("must be shorter than the session timeout (%s), got %s", cfg.sessionTimeout, cfg.heartbeatInterval))
	}
	if on, _, err := q.Bool("tls"); err != nil {
		return nil, err
	} else if cfg, err := q.TLS(on, nil); err != nil {
		return nil, err
	} else if cfg != nil {
		// franz-go sets each connection's ServerName to the broker it dials.
		s.tls = cfg
		s.base = append(s.base, kgo.DialTLSConfig(cfg))
	}
	mech, _ := q.String("sasl")
	if q.Has("sasl") && u.User == nil {
		return nil, q.Bad("sasl", "needs a user and password in the URL (kafka://user:password@host:port)")
	}
	if u.User != nil {
		m, err := saslMechanism(q, u.User, strings.ToLower(mech))
		if err != nil {
			return nil, err
		}
		s.base = append(s.base, kgo.SASL(m))
	}
	return s, nil
}

// saslMechanism is the SASL mechanism of the URL's user info.
func saslMechanism(q driverkit.Query, ui *url.Userinfo, mech string) (sasl.Mechanism, error) {
	user := ui.Username()
	pass, _ := ui.Password()
	if user == "" {
		return nil, bad("userinfo", "empty SASL user name")
	}
	switch mech {
	case "", "plain":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "scram-sha-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "scram-sha-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, q.Bad("sasl", "want plain, scram-sha-256 or scram-sha-512")
}

// OpenURL builds a transport from a parsed kafka:// URL: it creates the producer, checks
// that a broker answers within the dial timeout and reads the broker's message.max.bytes.
func OpenURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	all := slices.Concat([]Option{WithLogger(transport.LoggerFrom(ctx))}, s.opts, opts)
	cfg := newConfig(all)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	log := cfg.logger.With("transport", "kafka")
	// franz-go's warnings while Open checks the broker go to Debug: Open's error says it.
	var opening atomic.Bool
	opening.Store(true)
	defer opening.Store(false)
	gate := driverkit.ClientLog{Handler: log.Handler(), Level: func(l slog.Level) slog.Level {
		if opening.Load() {
			return min(l, slog.LevelDebug)
		}
		return l
	}}
	base := append(slices.Clip(s.base), kgo.WithLogger(clientLogger(slog.New(gate))))
	if cfg.tlsConfig != nil {
		s.tls = cfg.tlsConfig
		base = append(base, kgo.DialTLSConfig(cfg.tlsConfig))
	}
	transport.WarnInsecureTLS(log, "kafka", transport.RedactURL(u), s.tls)
	if cfg.dialer != nil {
		if s.tls != nil {
			bad := driverkit.Options{Broker: "kafka"}
			bad.Invalid("WithDialer", "cannot be combined with TLS (franz-go takes a dialer or a TLS configuration): dial TLS in the function, without tls in the URL")
			return nil, bad.Err()
		}
		base = append(base, kgo.Dialer(cfg.dialer))
	}
	popts := slices.Clip(base)
	if cfg.autoCreate {
		popts = append(popts, kgo.AllowAutoTopicCreation())
	}
	popts = append(popts, kgo.MetadataMinAge(250*time.Millisecond), kgo.DialTimeout(cfg.dialTimeout), kgo.RetryBackoffFn(retryBackoff))
	popts = append(popts, deadlineOpts(log)...)
	prod, err := kgo.NewClient(popts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: building the producer for %s: %w", transport.RedactURL(u), err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
	defer cancel()
	if err := prod.Ping(pctx); err != nil {
		prod.Close()
		if pctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within the dial timeout (%s): %w", cfg.dialTimeout, err)
		}
		return nil, transport.OpenFailed("kafka", transport.RedactURL(u), authCause(err))
	}
	t, err := newTransport(prod, true, Factory(append(base, kgo.DialTimeout(cfg.dialTimeout))...), all...)
	if err != nil {
		prod.Close()
		return nil, err
	}
	if err := t.loadLimit(pctx); err != nil {
		t.log.Warn("kafka: cannot read the broker's message.max.bytes; the producer's ProducerBatchMaxBytes alone bounds a record", "limit", t.limit.Load(), "err", err)
	}
	return t, nil
}

// Open builds a transport from a kafka:// URL string (see the package documentation for
// its parameters).
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := driverkit.ParseURL("kafka", rawURL)
	if err != nil {
		return nil, err
	}
	return OpenURL(ctx, u, opts...)
}
