// Package servicebus is the Azure Service Bus transport behind sb:// URLs (SPEC §7,
// binding §4), built on the Azure SDK for Go (azservicebus). docs/transports/servicebus.md
// says how it behaves, with the tests behind each statement.
//
// Import it for its side effect to make sb:// available to babelqueue.Open:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/servicebus"
//
// The URL is sb://<namespace>.servicebus.windows.net[?lock_renewal=…&max_lock_renewal=…
// &connect_timeout=…&max_message_size=…]; each parameter sets what the option of the
// same name sets ([WithLockRenewal], [WithMaxLockRenewal], [WithConnectTimeout],
// [WithMaxMessageSize]). The transport authenticates with
// azidentity.DefaultAzureCredential, or [WithConnectionString] or [WithCredential]; a
// client you built yourself goes through [New]. Consume checks that the queue can be
// read before it returns ([ErrUnreachable]).
//
// The body is the envelope, byte for byte; [Project] and [Reconcile] are the binding.
// Deliveries are received in peek-lock mode and their locks renewed while held. Ack
// completes the message after every settle write was confirmed; Rewind and HandOff
// abandon it, so that Service Bus moves it to the queue's own dead-letter sub-queue at
// MaxDeliveryCount. Queues must exist: the transport does not create them.
package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Scheme is the URL scheme this package registers.
const Scheme = "sb"

func init() {
	transport.Register(Scheme, func(ctx context.Context, u *url.URL) (transport.Transport, error) {
		// Opened by the runtime from a URL: log through the application's logger.
		return openURL(ctx, u, WithLogger(transport.LoggerFrom(ctx)))
	})
}

// DefaultLockRenewal is the renewal interval of lock_renewal=auto for a message that
// carries no LockedUntil time (otherwise: when half of the lock time left has passed).
const DefaultLockRenewal = 10 * time.Second

// DefaultConnectTimeout bounds the start-up check of Consume.
const DefaultConnectTimeout = 10 * time.Second

// DefaultMaxMessageSize is the default limit of the size check: the Standard tier's 256 KB.
const DefaultMaxMessageSize = 256 << 10

// maxMessageSizeLimit is the largest entity message size Service Bus offers (Premium).
const maxMessageSizeLimit = 100 << 20

// Option configures a transport built by [Open] or [New]. A value an option cannot use
// is an error of Open or New that names the option and matches
// babelqueue.ErrInvalidOption.
type Option func(*config)

type config struct {
	driverkit.Common // logger, connect timeout (of Consume's check), size limit
	connString       string
	credential       azcore.TokenCredential
	clientOptions    *azservicebus.ClientOptions
	renewEvery       time.Duration // 0: auto; <0: off
	maxRenewal       time.Duration // 0: until settled
	now              func() time.Time
	admin            queueAdmin // QueueStats counts through it (stats.go)
}

// WithConnectionString authenticates with a Service Bus connection string (SAS) instead
// of DefaultAzureCredential; the URL's host may then be empty (sb://) or must be the
// string's endpoint. The string never appears in errors or logs. New ignores it.
func WithConnectionString(cs string) Option { return func(c *config) { c.connString = cs } }

// WithCredential authenticates with cred instead of DefaultAzureCredential. New
// ignores it.
func WithCredential(cred azcore.TokenCredential) Option {
	return func(c *config) { c.credential = cred }
}

// WithClientOptions passes o to the SDK client that Open builds (TLS, websockets,
// retries). New ignores it.
func WithClientOptions(o *azservicebus.ClientOptions) Option {
	return func(c *config) { c.clientOptions = o }
}

// WithLogger sets the logger for lock-renewal and close problems (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.SetLogger(l) } }

// WithLockRenewal sets how often the lock of an unsettled delivery is renewed: on a
// positive period, when half of the lock time left has passed for zero (the default),
// never for a negative value.
func WithLockRenewal(every time.Duration) Option { return func(c *config) { c.renewEvery = every } }

// WithMaxLockRenewal stops renewing the lock of a delivery d after it was received.
// Zero (the default) renews until the delivery is settled; d may not be negative.
func WithMaxLockRenewal(d time.Duration) Option {
	return func(c *config) { c.SetAtLeast("WithMaxLockRenewal", &c.maxRenewal, d, 0) }
}

// WithConnectTimeout bounds the start-up check of Consume (default
// [DefaultConnectTimeout]; connect_timeout in the URL).
func WithConnectTimeout(d time.Duration) Option { return func(c *config) { c.SetConnectTimeout(d) } }

// WithMaxMessageSize sets the limit of the size check in bytes (default
// [DefaultMaxMessageSize]; max_message_size in the URL): the maximum message size of
// the entities written to, up to 100 MiB on Premium namespaces.
func WithMaxMessageSize(n int) Option { return func(c *config) { c.SetMaxMessageSize(n) } }

func newConfig(opts []Option) config {
	c := config{Common: driverkit.NewCommon("servicebus", DefaultConnectTimeout, DefaultMaxMessageSize, maxMessageSizeLimit), now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Transport is the sb:// transport. It is safe for concurrent use.
type Transport struct {
	ns  namespace
	cfg config

	consumers driverkit.Group        // closed by Close; then no sender is made
	senders   driverkit.Pool[sender] // one per queue written to
	closing   atomic.Bool
}

var _ transport.Transport = (*Transport)(nil)

// New builds a transport around a client you constructed (custom credential, TLS,
// websockets, retry options). Close does not close client: it stays yours.
func New(client *azservicebus.Client, opts ...Option) (*Transport, error) {
	if client == nil {
		return nil, errors.New("servicebus: New: nil client")
	}
	cfg := newConfig(opts)
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	return newTransport(sdkNamespace{client: client}, cfg), nil
}

func newTransport(ns namespace, cfg config) *Transport {
	t := &Transport{ns: ns, cfg: cfg}
	t.senders = driverkit.Pool[sender]{Make: ns.newSender, Free: func(ctx context.Context, s sender) error { return s.Close(ctx) }}
	return t
}

// Open parses an sb:// URL and connects to its namespace (lazily, on the first send or
// receive), with opts for what cannot be in a URL (a connection string, a credential);
// opts are applied after the URL's parameters.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := driverkit.ParseURL(Scheme, rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u, opts...)
}

// urlConfig is what an sb:// URL says.
type urlConfig struct {
	namespace string   // host[:port]; empty only with a connection string
	opts      []Option // the parameters, applied before the caller's options
}

func parseURL(u *url.URL) (urlConfig, error) {
	bad := func(param, reason string) error {
		return &transport.BadURLError{Scheme: Scheme, Param: param, Reason: reason}
	}
	var uc urlConfig
	if !strings.EqualFold(u.Scheme, Scheme) {
		return uc, bad("scheme", fmt.Sprintf("want sb://, got %q", u.Scheme+"://"))
	}
	if err := driverkit.RefuseParts(Scheme, u,
		driverkit.URLPart{Part: "opaque", Param: "url", Reason: "want sb://<namespace>.servicebus.windows.net"},
		driverkit.URLPart{Part: "user", Param: "userinfo", Reason: "credentials do not go in an sb:// URL: use DefaultAzureCredential, servicebus.WithConnectionString or servicebus.WithCredential"},
		driverkit.URLPart{Part: "path", Param: "path", Reason: "an sb:// URL names a namespace, not a queue: the queue is the runtime's queue option"},
		driverkit.URLPart{Part: "fragment", Param: "fragment", Reason: "an sb:// URL takes no fragment"}); err != nil {
		return uc, err
	}
	q, err := driverkit.ParseQuery("servicebus", u, append(urlOptions.Names(), "lock_renewal")...)
	if err != nil {
		return uc, err
	}
	if v, ok := q.String("lock_renewal"); ok {
		every := time.Duration(0) // auto
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "auto", "":
		case "off":
			every = -1
		default:
			if every, _, err = q.Duration("lock_renewal", time.Second, time.Millisecond, 0); err != nil {
				return uc, q.Bad("lock_renewal", fmt.Sprintf("want auto, off or a positive duration such as 20s; got %q", v))
			}
		}
		uc.opts = append(uc.opts, WithLockRenewal(every))
	}
	opts, err := urlOptions.Read(q)
	if err != nil {
		return uc, err
	}
	uc.opts = append(uc.opts, opts...)
	host := u.Host
	if host != "" {
		h := u.Hostname()
		if h == "" {
			return uc, bad("host", "empty host name")
		}
		if p := u.Port(); p != "" || strings.HasSuffix(host, ":") {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return uc, bad("port", fmt.Sprintf("%q is not a port", p))
			}
		}
		if !strings.Contains(h, ".") && !strings.EqualFold(h, "localhost") && net.ParseIP(h) == nil {
			return uc, bad("host", fmt.Sprintf("%q is not a fully qualified namespace: want <namespace>.servicebus.windows.net", h))
		}
	}
	uc.namespace = host
	return uc, nil
}

// urlOptions are the parameters of an sb:// URL that go to an option function as they are.
var urlOptions = append(driverkit.CommonParams(newConfig(nil).Common, WithConnectTimeout, WithMaxMessageSize),
	driverkit.Param[Option]{Name: "max_lock_renewal", Duration: WithMaxLockRenewal})

func openURL(_ context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	uc, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	cfg := newConfig(append(uc.opts, opts...))
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	co := cfg.clientOptions
	if co == nil {
		co = &azservicebus.ClientOptions{ApplicationID: "babelqueue-go"}
	}
	var client *azservicebus.Client
	switch {
	case cfg.connString != "":
		client, err = clientFromConnectionString(uc.namespace, cfg.connString, co)
		if err != nil {
			return nil, err
		}
	default:
		if uc.namespace == "" {
			return nil, &transport.BadURLError{Scheme: Scheme, Param: "host", Reason: "missing namespace: want sb://<namespace>.servicebus.windows.net"}
		}
		cred := cfg.credential
		if cred == nil {
			dc, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("servicebus: DefaultAzureCredential: %w", err)
			}
			cred = dc
		}
		cfg.credential = cred // for the administration client too
		client, err = azservicebus.NewClient(uc.namespace, cred, co)
		if err != nil {
			return nil, fmt.Errorf("servicebus: client for %s: %w", uc.namespace, err)
		}
	}
	if cfg.admin == nil {
		if cfg.admin, err = newAdmin(cfg, uc.namespace); err != nil {
			return nil, err
		}
	}
	return newTransport(sdkNamespace{client: client, owned: true}, cfg), nil
}

// ErrConnectionString matches every error about a connection string given with
// [WithConnectionString]. Its message never holds the key or the signature.
var ErrConnectionString = errors.New("servicebus: bad connection string")

// connString is what the transport reads of a connection string: the endpoint host (the
// SDK reads the rest) and the secrets, to scrub them from the SDK's errors.
type connString struct {
	endpointHost string
	secrets      []string
}

func parseConnString(cs string) (connString, error) {
	var out connString
	seenEndpoint := false
	for part := range strings.SplitSeq(cs, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return out, fmt.Errorf("%w: a part has no '=' (want Key=Value;…)", ErrConnectionString)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "endpoint":
			eu, err := url.Parse(strings.TrimSpace(v))
			if err != nil || eu.Host == "" {
				return out, fmt.Errorf("%w: Endpoint is not a URL such as sb://<namespace>.servicebus.windows.net/", ErrConnectionString)
			}
			out.endpointHost = eu.Host
			seenEndpoint = true
		case "sharedaccesskey", "sharedaccesssignature":
			if v != "" {
				out.secrets = append(out.secrets, v)
			}
		}
	}
	if !seenEndpoint {
		return out, fmt.Errorf("%w: no Endpoint", ErrConnectionString)
	}
	return out, nil
}

func (c connString) scrub(s string) string {
	for _, sec := range c.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

func clientFromConnectionString(host, cs string, co *azservicebus.ClientOptions) (*azservicebus.Client, error) {
	pc, err := parseConnString(cs)
	if err != nil {
		return nil, err
	}
	if host != "" && !strings.EqualFold(host, pc.endpointHost) {
		return nil, &transport.BadURLError{Scheme: Scheme, Param: "host",
			Reason: fmt.Sprintf("%q is not the connection string's endpoint %q (use sb:// with no host to take it from the connection string)", host, pc.endpointHost)}
	}
	client, err := azservicebus.NewClientFromConnectionString(cs, co)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrConnectionString, pc.scrub(err.Error()))
	}
	return client, nil
}

// Capabilities reports the Service Bus binding: attempts are max(body, DeliveryCount −
// 1), delays use ScheduledEnqueueTime, hand-off abandons until MaxDeliveryCount, and the
// schema gate accepts the integer 1 as well as "1".
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:                 transport.AttemptsMaxNative,
		Delay:                    true,
		HandOff:                  true,
		SchemaGate:               true,
		SchemaGateAcceptsInteger: true,
		DeadLetterSuffix:         ".dlq",
		PublishConfirmed:         true,
	}
}

// send projects m and sends it, returning once the broker confirmed it.
func (t *Transport) send(ctx context.Context, m *transport.Message) error {
	if m.Queue == "" {
		return errors.New("servicebus: message has no queue")
	}
	sm, err := Project(m, t.cfg.now())
	if err != nil {
		return err
	}
	size := messageSize(sm)
	if err := t.cfg.CheckSize(m.Queue, size, 0); err != nil {
		return err
	}
	if t.consumers.Closed() { // Close closes the consumers, then the senders
		return transport.ErrClosed
	}
	s, err := t.senders.Get(ctx, m.Queue)
	if err != nil {
		return err
	}
	err = s.SendMessage(ctx, sm, nil)
	if errors.Is(err, azservicebus.ErrMessageTooLarge) {
		// The entity allows less than max_message_size (the SDK checks the encoded
		// message against the link's limit).
		return fmt.Errorf("%w: servicebus: message for %q (%d bytes of body and properties) refused as larger than the entity allows, which is below max_message_size=%d: %w",
			transport.ErrTooLarge, m.Queue, size, t.cfg.MaxMessageSize, err)
	}
	return err
}

// Publish sends one message and returns once Service Bus accepted it.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if err := t.send(ctx, m); err != nil {
		if errors.Is(err, transport.ErrClosed) {
			return err
		}
		return fmt.Errorf("servicebus: publish to %q: %w", m.Queue, err)
	}
	return nil
}

// Close closes every consumer (their unsettled deliveries are abandoned so Service Bus
// redelivers them), the senders, and the client when Open built it.
func (t *Transport) Close(ctx context.Context) error {
	if !t.closing.CompareAndSwap(false, true) {
		return nil
	}
	errs := []error{t.consumers.Close(ctx)}
	if err := t.senders.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("servicebus: senders: %w", err))
	}
	if err := t.ns.close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("servicebus: close client: %w", err))
	}
	return errors.Join(errs...)
}
