package sqs

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue/transport"
)

func init() {
	transport.Register("sqs", func(ctx context.Context, u *url.URL) (transport.Transport, error) {
		return openURL(ctx, u)
	})
}

// urlParams are the query parameters an sqs:// URL accepts.
var urlParams = []string{"endpoint", "prefix", "fifo", "group_id", "wait_time"}

// settings is what an sqs:// URL says.
type settings struct {
	region   string
	endpoint string
	opts     []Option
}

// Open parses an sqs:// URL and returns a transport whose client uses the default AWS
// credential chain. opts are applied after the URL's own settings.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &transport.BadURLError{Scheme: "sqs", Param: "url", Reason: "cannot parse (" + transport.Redact(rawURL) + ")"}
	}
	return openURL(ctx, u, opts...)
}

func openURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(s.region))
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	client := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if s.endpoint != "" {
			o.BaseEndpoint = aws.String(s.endpoint)
		}
	})
	return New(client, append(s.opts, opts...)...), nil
}

func bad(param, reason string) error {
	return &transport.BadURLError{Scheme: "sqs", Param: param, Reason: reason}
}

// parseURL checks an sqs:// URL and turns it into settings. Errors name the part at
// fault and never echo credentials.
func parseURL(u *url.URL) (settings, error) {
	var s settings
	if !strings.EqualFold(u.Scheme, "sqs") {
		return s, bad("scheme", fmt.Sprintf("want sqs://, got %q", u.Scheme+"://"))
	}
	if u.Opaque != "" {
		return s, bad("region", "want sqs://<region>, e.g. sqs://eu-central-1")
	}
	if u.User != nil {
		return s, bad("userinfo", "credentials in the URL are not supported; they come from the default AWS chain (or build the client yourself and call sqs.New)")
	}
	if u.Port() != "" {
		return s, bad("region", "a region takes no port; set the emulator address with ?endpoint=")
	}
	s.region = u.Hostname()
	if s.region == "" {
		return s, bad("region", "missing: want sqs://<region>, e.g. sqs://eu-central-1")
	}
	if !validRegion(s.region) {
		return s, bad("region", fmt.Sprintf("%q is not a region name (lower-case letters, digits and dashes)", s.region))
	}
	if u.Path != "" && u.Path != "/" {
		return s, bad("path", "sqs:// takes no path; name queues in the runtime, or use ?prefix= for a queue-URL prefix")
	}
	if u.Fragment != "" {
		return s, bad("fragment", "sqs:// takes no fragment")
	}
	if err := transport.CheckParams(u, urlParams...); err != nil {
		return s, err
	}
	q := u.Query()
	for k, v := range q {
		if len(v) > 1 {
			return s, bad(k, "given more than once")
		}
	}
	if q.Has("endpoint") {
		ep := q.Get("endpoint")
		if err := checkHTTPURL(ep); err != "" {
			return s, bad("endpoint", err)
		}
		s.endpoint = strings.TrimRight(ep, "/")
	}
	if q.Has("prefix") {
		p := q.Get("prefix")
		if err := checkHTTPURL(p); err != "" {
			return s, bad("prefix", err)
		}
		s.opts = append(s.opts, WithQueueURLPrefix(p))
	}
	if q.Has("fifo") {
		switch strings.ToLower(q.Get("fifo")) {
		case "1", "true", "yes", "on":
			s.opts = append(s.opts, WithFIFO(true))
		case "0", "false", "no", "off":
			s.opts = append(s.opts, WithFIFO(false))
		default:
			return s, bad("fifo", fmt.Sprintf("%q is not a boolean (want 1 or 0)", q.Get("fifo")))
		}
	}
	if q.Has("group_id") {
		g := q.Get("group_id")
		if !validFIFOID(g) {
			return s, bad("group_id", "want 1 to 128 ASCII letters, digits or punctuation")
		}
		s.opts = append(s.opts, WithGroupID(g))
	}
	if q.Has("wait_time") {
		n, err := strconv.Atoi(q.Get("wait_time"))
		if err != nil || n < 0 || n > 20 {
			return s, bad("wait_time", fmt.Sprintf("%q is not a whole number of seconds from 0 to 20", q.Get("wait_time")))
		}
		s.opts = append(s.opts, WithWaitTime(time.Duration(n)*time.Second))
	}
	return s, nil
}

func validRegion(r string) bool {
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// checkHTTPURL returns why raw is not an http(s) URL with a host, or "".
func checkHTTPURL(raw string) string {
	if raw == "" {
		return "empty"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "not a URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "want an http:// or https:// URL"
	}
	if u.User != nil {
		return "must not hold credentials"
	}
	if u.Host == "" {
		return "has no host"
	}
	return ""
}
