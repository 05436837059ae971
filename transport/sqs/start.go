package sqs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DefaultConnectTimeout bounds each start-up check of [Open]: finding the credentials
// and reaching the endpoint.
const DefaultConnectTimeout = 10 * time.Second

var (
	// ErrNoCredentials matches the error of [Open] when the default AWS credential
	// chain found no credentials. The error says which are missing and how to give them.
	ErrNoCredentials = errors.New("sqs: no AWS credentials")
	// ErrUnreachable matches the error of [Open] when the SQS endpoint did not answer
	// within the connect timeout.
	ErrUnreachable = errors.New("sqs: endpoint unreachable")
)

// checkCredentials asks the default chain for credentials once, so that a missing key
// fails Open with an error that says how to give one.
func checkCredentials(ctx context.Context, cfg aws.Config, timeout time.Duration, loopback bool) error {
	if cfg.Credentials == nil {
		return credentialsError(errors.New("the configuration has no credential provider"), loopback)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return credentialsError(err, loopback)
	}
	return nil
}

// credentialsError says which credentials are missing and how to give them. It names
// environment variables, never their values.
func credentialsError(cause error, loopback bool) error {
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID") != "", os.Getenv("AWS_SECRET_ACCESS_KEY") != ""
	var missing []string
	switch {
	case key && !secret:
		missing = append(missing, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not")
	case secret && !key:
		missing = append(missing, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not")
	case !key:
		missing = append(missing, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
	}
	if p := os.Getenv("AWS_PROFILE"); p != "" {
		missing = append(missing, fmt.Sprintf("the profile AWS_PROFILE=%q gave none", p))
	} else {
		missing = append(missing, "no default profile in ~/.aws/credentials or ~/.aws/config")
	}
	if loopback {
		missing = append(missing, "the EC2 instance metadata service is not asked with an endpoint on this machine")
	}
	return fmt.Errorf("%w (%s): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any non-empty values do for ElasticMQ or LocalStack), "+
		"or AWS_PROFILE naming a profile with credentials, or run with a web identity or an instance or task role; "+
		"or build the client yourself and call sqs.New: %w", ErrNoCredentials, strings.Join(missing, "; "), cause)
}

// probe asks the endpoint one cheap question ([answers]) within timeout.
func probe(ctx context.Context, client *awssqs.Client, endpoint, region string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := answers(ctx, client)
	if err == nil {
		return nil
	}
	where := endpoint
	if where == "" {
		where = "the SQS endpoint of " + region
	}
	return fmt.Errorf("%w: %s did not answer within %s (connect_timeout): %w", ErrUnreachable, where, timeout, err)
}

// answers asks the endpoint one cheap question (ListQueues of at most one name, no
// retry): nil for any answer, a refusal too, else why there was none.
func answers(ctx context.Context, client api) error {
	_, err := client.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1), QueueNamePrefix: aws.String("babelqueue-probe")},
		func(o *awssqs.Options) { o.RetryMaxAttempts = 1 })
	var send *smithyhttp.RequestSendError
	if err == nil || !errors.As(err, &send) && ctx.Err() == nil {
		return nil
	}
	return err
}

// sdkLogger hands the AWS SDK's log lines to the transport's logger, marked
// component=aws-sdk: warnings as Warn, the rest as Debug.
type sdkLogger struct {
	l   *slog.Logger
	ctx context.Context
}

// Logf logs one line of the SDK.
func (s sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	s.l.Log(cmp.Or(s.ctx, context.Background()), level, fmt.Sprintf(format, v...), "component", "aws-sdk")
}

// WithContext returns the logger for one operation, so handlers see its context.
func (s sdkLogger) WithContext(ctx context.Context) logging.Logger {
	return sdkLogger{l: s.l, ctx: ctx}
}

// inMemoryBodies returns a client with c's options whose HTTP requests carry their body
// in memory and whose timeouts drop idle connections ([bufferedBodies]); c itself is
// left as it is.
func inMemoryBodies(c *awssqs.Client) *awssqs.Client {
	return awssqs.New(c.Options(), func(o *awssqs.Options) { o.HTTPClient = bufferedBodies{closableClient(o.HTTPClient)} })
}

// bufferedBodies reads each request body into memory before the request is sent, so
// that net/http neither streams it nor reads it again after the SDK closed it (which
// made the SDK send a request twice: docs/transports/sqs.md, "Request bodies in memory").
//
// A request that ran out of time drops the client's idle connections (when the client
// can: an [*http.Client] can, the SDK's default client is made one by [closableClient]):
// a connection that died without a reset is found only by such a timeout, and every
// other connection pooled beside it is as likely dead. Without this, each later call
// would take one of them and wait out a timeout of its own.
type bufferedBodies struct{ awssqs.HTTPClient }

// Do sends req with its body in memory.
func (c bufferedBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := c.HTTPClient.Do(req)
	if err != nil && errors.Is(req.Context().Err(), context.DeadlineExceeded) {
		if idle, ok := c.HTTPClient.(interface{ CloseIdleConnections() }); ok {
			idle.CloseIdleConnections()
		}
	}
	return resp, err
}

// closableClient returns the SDK's default HTTP client c as an [*http.Client] on a copy
// of its transport (TLS settings and CA bundle included), which can drop its idle
// connections ([bufferedBodies]); like the SDK's, it follows no redirect. Any other
// client is returned as it is.
func closableClient(c aws.HTTPClient) aws.HTTPClient {
	b, ok := c.(*awshttp.BuildableClient)
	if !ok {
		return c
	}
	return &http.Client{
		Transport:     b.GetTransport(),
		Timeout:       b.GetTimeout(),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
