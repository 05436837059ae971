package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Opener builds a transport from a broker URL. The URL has already been parsed; its
// scheme is one the opener registered for.
type Opener func(ctx context.Context, u *url.URL) (Transport, error)

// ErrUnknownScheme is returned by [Open] for a URL whose scheme no imported package
// registered.
var ErrUnknownScheme = errors.New("transport: unknown URL scheme")

// ErrBadURL matches every error about a malformed broker URL or an invalid query
// parameter.
var ErrBadURL = errors.New("transport: bad broker URL")

// The URL-scheme registry is the one piece of global state: broker packages fill it
// from init functions.
var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// providers names the package that provides each scheme of the specification, so an
// unknown-scheme error can say what to import.
var providers = map[string]string{
	"memory":      "github.com/babelqueue-go/babelqueue/transport/memory",
	"redis":       "github.com/babelqueue-go/babelqueue/transport/redis",
	"rediss":      "github.com/babelqueue-go/babelqueue/transport/redis",
	"amqp":        "github.com/babelqueue-go/babelqueue/transport/amqp",
	"amqps":       "github.com/babelqueue-go/babelqueue/transport/amqp",
	"kafka":       "github.com/babelqueue-go/babelqueue/transport/kafka",
	"sqs":         "github.com/babelqueue-go/babelqueue/transport/sqs",
	"sb":          "github.com/babelqueue-go/babelqueue/transport/servicebus",
	"pulsar":      "github.com/babelqueue-go/babelqueue/transport/pulsar",
	"pulsar+ssl":  "github.com/babelqueue-go/babelqueue/transport/pulsar",
	"artemis":     "github.com/babelqueue-go/babelqueue/transport/artemis",
	"artemis+ssl": "github.com/babelqueue-go/babelqueue/transport/artemis",
}

// Register makes a URL scheme available to [Open]. It is meant to be called from the
// init function of a broker package; registering a scheme twice panics, as that is a
// programming error caught at start-up.
func Register(scheme string, open Opener) {
	scheme = strings.ToLower(scheme)
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[scheme]; dup {
		panic("transport: scheme registered twice: " + scheme)
	}
	registry[scheme] = open
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open parses rawURL and builds the transport registered for its scheme.
func Open(ctx context.Context, rawURL string) (Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadURL, redactParseError(err))
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme (want e.g. memory://, redis://host:6379/0)", ErrBadURL, Redact(rawURL))
	}
	registryMu.RLock()
	open, ok := registry[scheme]
	registryMu.RUnlock()
	if !ok {
		return nil, unknownScheme(scheme)
	}
	t, err := open(ctx, u)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func unknownScheme(scheme string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %q", ErrUnknownScheme.Error(), scheme+"://")
	if pkg, known := providers[scheme]; known {
		fmt.Fprintf(&b, " is provided by %s: import it (import _ %q)", pkg, pkg)
	}
	b.WriteString("; registered: ")
	reg := Schemes()
	if len(reg) == 0 {
		b.WriteString("none")
	}
	for i, s := range reg {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s + "://")
	}
	registered := make(map[string]bool, len(reg))
	for _, s := range reg {
		registered[s] = true
	}
	var other []string
	for s := range providers {
		if !registered[s] {
			other = append(other, s)
		}
	}
	sort.Strings(other)
	for i, s := range other {
		if i == 0 {
			b.WriteString("; not imported: ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s:// (%s)", s, providers[s])
	}
	return &unknownSchemeError{msg: b.String()}
}

type unknownSchemeError struct{ msg string }

func (e *unknownSchemeError) Error() string        { return e.msg }
func (e *unknownSchemeError) Is(target error) bool { return target == ErrUnknownScheme }

// Redact returns rawURL with any password replaced by "xxxxx", for logs and errors.
// A string that does not parse as a URL is reduced to its scheme.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if i := strings.Index(rawURL, "://"); i > 0 {
			return rawURL[:i] + "://[unparseable URL redacted]"
		}
		return "[unparseable URL redacted]"
	}
	return RedactURL(u)
}

// RedactURL renders u with any password, and any query parameter whose name suggests a
// secret, replaced by "xxxxx".
func RedactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	if c.RawQuery != "" {
		q := c.Query()
		changed := false
		for k := range q {
			if isSecretParam(k) {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}

func isSecretParam(name string) bool {
	n := strings.ToLower(name)
	if n == ParamTLSKey || n == "keyfile" || n == "token_file" || n == "sasl" {
		return false // the path of a key or token file, a SASL mechanism's name: not secrets
	}
	for _, s := range []string{"password", "secret", "token", "key", "sas", "signature", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// redactParseError keeps url.Parse's complaint without echoing the URL, which may hold
// a password.
func redactParseError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return "cannot parse URL: " + ue.Err.Error()
	}
	return "cannot parse URL"
}

// BadURLError is the typed form of [ErrBadURL]: it names the offending part (a query
// parameter, the host, the path) without echoing credentials.
type BadURLError struct {
	Scheme string // the URL scheme
	Param  string // the query parameter or URL part at fault
	Reason string // what is wrong with it
}

// Error describes the fault.
func (e *BadURLError) Error() string {
	return fmt.Sprintf("transport: bad %s:// URL: %s: %s", e.Scheme, e.Param, e.Reason)
}

// Is makes the error match [ErrBadURL].
func (e *BadURLError) Is(target error) bool { return target == ErrBadURL }

// CheckParams returns a [BadURLError] naming the first query parameter of u that is
// not in allowed.
func CheckParams(u *url.URL, allowed ...string) error {
	q := u.Query()
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			reason := "unknown query parameter"
			if len(allowed) > 0 {
				reason += " (known: " + strings.Join(allowed, ", ") + ")"
			}
			return &BadURLError{Scheme: u.Scheme, Param: k, Reason: reason}
		}
	}
	return nil
}

type loggerKey struct{}

// ContextWithLogger returns a copy of ctx that carries l to the [Opener] that [Open]
// calls: the runtime passes its logger this way, so a transport opened by URL logs
// through the application's logger.
func ContextWithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// LoggerFrom returns the logger carried by ctx ([ContextWithLogger]), or slog.Default()
// when there is none. Openers call it to log through the application's logger.
func LoggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}
