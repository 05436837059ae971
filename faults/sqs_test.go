package faults_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"

	_ "github.com/babelqueue-go/babelqueue/transport/sqs"
)

// sqsVisibility is the visibility timeout of the runs: a killed worker's messages are
// received again once it passed.
const sqsVisibility = 5 * time.Second

var sqsBroker = broker{
	name: "SQS (ElasticMQ)", urlEnv: "BQ_SQS_URL", gate: "sqs", bind: sqsBinding,
	private:   privateElasticMQ,
	open:      openSQS,
	sharedCut: true,
}

func sqsBinding(t *testing.T, raw string) *faultsuite.Binding {
	endpoint := parseURL(t, raw).Query().Get("endpoint")
	if endpoint == "" {
		t.Fatalf("%s has no endpoint: the suite runs against ElasticMQ", transport.Redact(raw))
	}
	// The queues are made by Prepare, as infrastructure code makes them, and the
	// transport is given their URLs' prefix: it never creates a queue (a deleted
	// dead-letter queue would otherwise be created again by the next write).
	raw = withParams(raw, "visibility_timeout", strconv.Itoa(int(sqsVisibility/time.Second)), "wait_time", "1",
		"prefix", strings.TrimSuffix(endpoint, "/")+"/000000000000")
	return &faultsuite.Binding{
		Name: "SQS (ElasticMQ)",
		URL:  func(faultsuite.Role, string) string { return raw },
		Prepare: func(ctx context.Context, queue, dlq string) error {
			for _, q := range []string{queue, dlq} {
				if _, err := sqsCall(ctx, endpoint, "CreateQueue", "QueueName", q); err != nil {
					return err
				}
			}
			return nil
		},
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			qurl, err := sqsCall(ctx, endpoint, "GetQueueUrl", "QueueName", dlq)
			if err != nil {
				return nil, err
			}
			if _, err := sqsCall(ctx, endpoint, "DeleteQueue", "QueueUrl", qurl); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				_, err := sqsCall(ctx, endpoint, "CreateQueue", "QueueName", dlq)
				return err
			}, nil
		},
		DLQDestructive: true,
		DLQMethod: "the dead-letter queue deleted (DeleteQueue): every SendMessage to it fails with " +
			"QueueDoesNotExist; healed by creating it again. ElasticMQ has no refusal that keeps the queue " +
			"(it does not enforce MaximumMessageSize), so dead letters confirmed just before the deletion and " +
			"not read yet are destroyed with it (counted apart, not missing)",
		Bounds: map[faultsuite.Scenario]time.Duration{faultsuite.Kill: sqsVisibility + faultsuite.DefaultBound},
		// Each delete is answered before Settle returns.
		Duplicates: heldWindow(prefetch, "the messages a consumer held (prefetch = concurrency): a delete lost with the "+
			"connection, or with the killed worker, leaves the message to come back after the visibility timeout"),
		Settings: "visibility_timeout=5 (the consumer keeps it up for handlers still running): a killed worker's " +
			"messages are received again after 5 s; wait_time=1 (long polls of 1 s); prefix set, queues made beforehand",
	}
}

// sqsQueueURL finds the queue URL in ElasticMQ's XML answers.
var sqsQueueURL = regexp.MustCompile(`<QueueUrl>\s*([^<\s]+)\s*</QueueUrl>`)

// sqsCall makes one call of SQS's query protocol to an ElasticMQ endpoint (which asks
// for no signature) and returns the QueueUrl of the answer, if any.
func sqsCall(ctx context.Context, endpoint, action string, kv ...string) (string, error) {
	form := url.Values{"Action": {action}, "Version": {"2012-11-05"}}
	for i := 0; i+1 < len(kv); i += 2 {
		form.Set(kv[i], kv[i+1])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("SQS %s: %s: %s", action, resp.Status, body)
	}
	if m := sqsQueueURL.FindSubmatch(body); m != nil {
		return string(m[1]), nil
	}
	return "", nil
}

// openSQS proxies the endpoint parameter's host.
var openSQS = openThrough(func(u *url.URL) (string, func(string), error) {
	q := u.Query()
	ep, err := url.Parse(q.Get("endpoint"))
	if err != nil {
		return "", nil, err
	}
	return ep.Host, func(proxy string) {
		ep.Host = proxy
		q.Set("endpoint", ep.String())
		u.RawQuery = q.Encode()
	}, nil
})

// privateElasticMQ starts an ElasticMQ of its own from the class path scripts/brokers.sh
// caches, with its queues and messages persisted (queues-storage, messages-storage in
// H2); the restart is SIGTERM and a start on the same files.
func privateElasticMQ(t *testing.T) *faultsuite.Binding {
	transporttest.BrokerURL(t, "BQ_SQS_URL", "sqs")
	java, dist := javaDist(t, "elasticmq", "BQ_ELASTICMQ_VERSION", "1.7.1", "libs/elasticmq-persistence-sql*.jar",
		"; run `scripts/brokers.sh up sqs` (it installs java and caches ElasticMQ with its SQL persistence)")
	libs := filepath.Join(dist, "libs")
	dir := privateDir(t, "elasticmq")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := brokerproc.FreePort(t)
	conf := fmt.Sprintf(`include classpath("application.conf")
node-address { protocol = "http", host = "127.0.0.1", port = %[1]d, context-path = "" }
rest-sqs { enabled = true, bind-port = %[1]d, bind-hostname = "127.0.0.1", sqs-limits = strict }
rest-stats { enabled = false }
generate-node-address = false
aws { region = "us-east-1", accountId = "000000000000" }
queues-storage { enabled = true, path = "%[2]s/queues.conf" }
messages-storage { enabled = true, uri = "jdbc:h2:%[2]s/messages" }
`, port, dir)
	confPath := filepath.Join(dir, "elasticmq.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := brokerproc.New(t, brokerproc.Config{
		Name: "private ElasticMQ",
		Command: func() *exec.Cmd {
			cmd := exec.Command(java, "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
				"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", "-Dconfig.file="+confPath,
				"-cp", filepath.Join(libs, "*"), "org.elasticmq.server.Main")
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		Log: filepath.Join(dir, "node.log"),
		Ready: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := sqsCall(ctx, endpoint, "ListQueues")
			return err
		},
		Poll:     200 * time.Millisecond,
		Awaiting: "answer ListQueues",
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	b := sqsBinding(t, "sqs://us-east-1?endpoint="+url.QueryEscape(endpoint))
	b.Stop = func() error { p.Stop(); return nil }
	b.Start = p.Start
	b.RestartMethod = "SIGTERM of a private ElasticMQ with queues-storage and messages-storage (H2) on, started again on its files"
	return b
}
