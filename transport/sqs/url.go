package sqs

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func init() {
	transport.Register("sqs", func(ctx context.Context, u *url.URL) (transport.Transport, error) {
		return openURL(ctx, u)
	})
}

// settings is what an sqs:// URL says.
type settings struct {
	region   string
	endpoint string
	opts     []Option
}

// Open parses an sqs:// URL and returns a transport whose client uses the default AWS
// credential chain; opts are applied after the URL's own settings. It fails at once
// when the chain finds no credentials ([ErrNoCredentials]) or the endpoint does not
// answer within the connect timeout ([ErrUnreachable]). The AWS SDK logs through the
// transport's logger (by default the context's, [transport.LoggerFrom]).
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := driverkit.ParseURL("sqs", rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u, opts...)
}

func openURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	all := append([]Option{WithLogger(transport.LoggerFrom(ctx))}, s.opts...)
	t := newTransport(nil, append(all, opts...)...)
	if err := t.common.Err(); err != nil {
		return nil, err
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRegion(s.region),
		config.WithLogger(sdkLogger{l: t.common.Logger}),
	}
	local := driverkit.IsLoopback(s.endpoint)
	if local { // an emulator on this machine: never wait for an instance role
		loadOpts = append(loadOpts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	if err := checkCredentials(ctx, cfg, t.common.ConnectTimeout, local); err != nil {
		return nil, err
	}
	client := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if s.endpoint != "" {
			o.BaseEndpoint = aws.String(s.endpoint)
		}
	})
	if err := probe(ctx, client, s.endpoint, s.region, t.common.ConnectTimeout); err != nil {
		return nil, err
	}
	t.client = inMemoryBodies(client)
	return t, nil
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
	if err := driverkit.RefuseParts("sqs", u,
		driverkit.URLPart{Part: "opaque", Param: "region", Reason: "want sqs://<region>, e.g. sqs://eu-central-1"},
		driverkit.URLPart{Part: "user", Param: "userinfo", Reason: "credentials in the URL are not supported; they come from the default AWS chain (or build the client yourself and call sqs.New)"},
		driverkit.URLPart{Part: "port", Param: "region", Reason: "a region takes no port; set the emulator address with ?endpoint="},
		driverkit.URLPart{Part: "path", Param: "path", Reason: "sqs:// takes no path; name queues in the runtime, or use ?prefix= for a queue-URL prefix"},
		driverkit.URLPart{Part: "fragment", Param: "fragment", Reason: "sqs:// takes no fragment"}); err != nil {
		return s, err
	}
	s.region = u.Hostname()
	if s.region == "" {
		return s, bad("region", "missing: want sqs://<region>, e.g. sqs://eu-central-1")
	}
	if !validRegion(s.region) {
		return s, bad("region", fmt.Sprintf("%q is not a region name (lower-case letters, digits and dashes)", s.region))
	}
	q, err := driverkit.ParseQuery("sqs", u, append(urlOptions.Names(), "endpoint")...)
	if err != nil {
		return s, err
	}
	if ep, ok := q.String("endpoint"); ok {
		if why := driverkit.CheckHTTPURL(ep); why != "" {
			return s, q.Bad("endpoint", why)
		}
		s.endpoint = strings.TrimRight(ep, "/")
	}
	s.opts, err = urlOptions.Read(q)
	return s, err
}

// urlOptions are the parameters of an sqs:// URL that go to an option function, all but
// the region and the endpoint.
var urlOptions = append(driverkit.CommonParams(newCommon(), WithConnectTimeout, WithMaxMessageSize), driverkit.Params[Option]{
	{Name: "prefix", String: WithQueueURLPrefix, Check: driverkit.CheckHTTPURL},
	{Name: "group_id", String: WithGroupID, Check: checkGroupID},
	{Name: "fifo", Bool: WithFIFO},
	{Name: "wait_time", Duration: WithWaitTime, Hi: 20 * time.Second},
	{Name: "visibility_timeout", Duration: WithVisibilityTimeout, Lo: time.Second, Hi: 12 * time.Hour},
	{Name: "publish_wait", Duration: WithPublishWait, Hi: time.Hour},
}...)

// validRegion reports whether r can be a region name: lower-case letters, digits and dashes.
var validRegion = regexp.MustCompile(`^[a-z0-9-]*$`).MatchString
