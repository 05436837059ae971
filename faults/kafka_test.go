package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kafkaSessionTimeout is the transport's default session timeout: a killed worker's
// partitions go to the others once it passed.
const kafkaSessionTimeout = 10 * time.Second

var kafkaBroker = broker{
	name: "Kafka", urlEnv: "BQ_KAFKA_URL", gate: "kafka", bind: kafkaBinding,
	private:   privateKafka,
	open:      openKafka,
	sharedCut: true,
}

func kafkaBinding(t *testing.T, raw string) *faultsuite.Binding {
	seeds := strings.Split(parseURL(t, raw).Host, ",")
	admin := func(ctx context.Context, f func(*kadm.Client) error) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			return err
		}
		defer cl.Close()
		return f(kadm.NewClient(cl))
	}
	setDLQConfig := func(ctx context.Context, dlq string, op kadm.IncrementalOp, value *string) error {
		return admin(ctx, func(adm *kadm.Client) error {
			resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: "max.message.bytes", Value: value}}, dlq)
			if err != nil {
				return err
			}
			for _, r := range resp {
				if r.Err != nil {
					return fmt.Errorf("%s: %w (%s)", r.Name, r.Err, r.ErrMessage)
				}
			}
			return nil
		})
	}
	return &faultsuite.Binding{
		Name: "Kafka",
		URL: func(role faultsuite.Role, queue string) string {
			switch role {
			case faultsuite.RolePublisher:
				return withParams(raw, "confirm", "1") // a publish returns once the broker has the record
			case faultsuite.RoleReader:
				return withParams(raw, "group", queue+"-reader")
			}
			return withParams(raw, "group", queue)
		},
		// A partition per worker, so each has its share; one for the dead letters.
		Prepare: func(ctx context.Context, queue, dlq string) error {
			return admin(ctx, func(adm *kadm.Client) error {
				for topic, parts := range map[string]int32{queue: 4, dlq: 1} {
					resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
					if err == nil {
						err = resp.Err
					}
					if err != nil {
						return fmt.Errorf("create topic %s: %w", topic, err)
					}
				}
				return nil
			})
		},
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			tiny := "100"
			if err := setDLQConfig(ctx, dlq, kadm.SetConfig, &tiny); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return setDLQConfig(ctx, dlq, kadm.DeleteConfig, nil) }, nil
		},
		DLQMethod: "the dead-letter topic's max.message.bytes set to 100 (kadm AlterTopicConfigs): the broker refuses " +
			"every dead letter with MESSAGE_TOO_LARGE; healed by deleting the setting",
		Bounds:     map[faultsuite.Scenario]time.Duration{faultsuite.Kill: kafkaSessionTimeout + faultsuite.DefaultBound},
		Duplicates: kafkaDuplicates,
		Settings: "session_timeout=10s (the default): a killed worker's partitions go to the others after it; " +
			"a record is committed once it and every record before it on its partition are settled, so a crash between " +
			"settle and commit redelivers (duplicates bounded by the records settled since the last commit); " +
			"pipeline_settles on (the default); the publisher uses confirm=1",
	}
}

// kafkaCommitInterval is the transport's default commit interval (kafka.WithCommitInterval).
const kafkaCommitInterval = 100 * time.Millisecond

// kafkaDuplicates is the Kafka transport's documented duplicate bound for plan p: a
// consumer struck by a fault redelivers what it handed out since its last commit, at
// most max_uncommitted records, and no more than it hands out in a commit interval and
// max_uncommitted_time (after which it stops taking records while its commits fail) at
// its handling speed, plus what its workers hold.
func kafkaDuplicates(p faultsuite.Plan) (int, string) {
	n := faultsuite.Affected(p)
	if n == 0 {
		return 0, ""
	}
	window := kafkaCommitInterval + kafka.DefaultMaxUncommittedTime
	w := min(kafka.DefaultMaxUncommitted, int(math.Ceil(faultsuite.HandOutRate(p)*window.Seconds()-1e-6))+p.Concurrency)
	return n * w, fmt.Sprintf("%d × %d, the records a consumer hands out since its last commit: at most max_uncommitted (%d), "+
		"and what it hands out at %.0f/s in commit_interval + max_uncommitted_time (%s), plus its prefetch (%d)",
		n, w, kafka.DefaultMaxUncommitted, faultsuite.HandOutRate(p), window, p.Concurrency)
}

// openKafka opens a worker's transport (or the run's publisher's) from its URL, for a
// cut with every connection dialled through a proxy's switch (kafka.WithDialer): a
// Kafka client dials the addresses the cluster's metadata names, so a listening proxy
// would not carry them. The clients are the transport's own, with its defaults (the
// request timeouts that find a silent connection dead among them).
func openKafka(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
	if !spec.Cut {
		return openPlain(ctx, spec)
	}
	u, err := url.Parse(spec.URL)
	if err != nil {
		return nil, nil, err
	}
	p, err := faultproxy.New(strings.Split(u.Host, ",")[0])
	if err != nil {
		return nil, nil, err
	}
	tr, err := kafka.OpenURL(ctx, u, kafka.WithLogger(transport.LoggerFrom(ctx)), kafka.WithDialer(p.DialContext))
	if err != nil {
		_ = p.Close()
		return nil, nil, err
	}
	return tr, p, nil
}

// privateKafka formats and starts a single-node KRaft Kafka from the distribution
// scripts/brokers.sh caches, with the shared broker's configuration on free ports and
// a private data directory; the restart is a controlled shutdown (SIGTERM) and a start
// on the same data.
func privateKafka(t *testing.T) *faultsuite.Binding {
	transporttest.BrokerURL(t, "BQ_KAFKA_URL", "kafka")
	java, dist := javaDist(t, "kafka", "BQ_KAFKA_VERSION", "4.1.1", "libs/kafka_2.13-*.jar",
		"; run `scripts/brokers.sh up kafka` (it installs java and caches the Kafka distribution)")
	libs := filepath.Join(dist, "libs")
	dir := privateDir(t, "kafka")
	port := brokerproc.FreePort(t)
	ctrl := brokerproc.FreePort(t, port)
	tmpl, err := os.ReadFile(filepath.Join("..", "scripts", "brokers", "kafka-server.properties"))
	if err != nil {
		t.Fatal(err)
	}
	props := filepath.Join(dir, "server.properties")
	conf := strings.NewReplacer("@PORT@", strconv.Itoa(port), "@CONTROLLER_PORT@", strconv.Itoa(ctrl),
		"@LOG_DIRS@", filepath.Join(dir, "data"), "@AUTO_CREATE@", "false").Replace(string(tmpl))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(props, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	jvm := []string{"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:MaxDirectMemorySize=64m", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dkafka.logs.dir=" + dir, "-cp", filepath.Join(libs, "*")}
	if l4j, err := filepath.Abs(filepath.Join("..", "scripts", "brokers", "log4j2.properties")); err == nil {
		jvm = append([]string{"-Dlog4j2.configurationFile=" + l4j}, jvm...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	format := exec.CommandContext(ctx, java, append(slices.Clip(jvm), "kafka.tools.StorageTool", "format",
		"-t", "bqfaults-kafka-cluster0", "-c", props)...)
	if out, err := format.CombinedOutput(); err != nil {
		t.Fatalf("kafka storage format: %v\n%s", err, out)
	}
	seed := "127.0.0.1:" + strconv.Itoa(port)
	p := brokerproc.New(t, brokerproc.Config{
		Name: "private Kafka",
		Command: func() *exec.Cmd {
			cmd := exec.Command(java, append(slices.Clip(jvm), "kafka.Kafka", props)...)
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		Log:   filepath.Join(dir, "node.log"),
		Ready: func() error { return kafkaReady(seed) },
		Poll:  200 * time.Millisecond,
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	b := kafkaBinding(t, "kafka://"+seed)
	b.Stop = func() error { p.Stop(); return nil }
	b.Start = p.Start
	b.RestartMethod = "SIGTERM of a private single-node KRaft Kafka (a controlled shutdown), started again on its log directory"
	return b
}

// kafkaReady reports whether the broker's metadata lists a broker.
func kafkaReady(seed string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx)
	if err == nil && len(md.Brokers) == 0 {
		err = errors.New("no broker in the metadata")
	}
	return err
}
