package faults_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transporttest"

	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
)

const rabbitBin = "/usr/lib/rabbitmq/bin"

var amqpBroker = broker{
	name: "RabbitMQ", urlEnv: "BQ_AMQP_URL", gate: "rabbitmq",
	bind:      func(t *testing.T, raw string) *faultsuite.Binding { return amqpBinding(t, raw, sharedRabbit(t)) },
	private:   privateRabbit,
	open:      openProxied,
	sharedCut: true,
}

// rabbitNode runs rabbitmqctl against one node.
type rabbitNode struct {
	name string
	env  []string
	cred *syscall.Credential
	dir  string
}

func (n *rabbitNode) cmd(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitBin, bin), args...)
	cmd.Env, cmd.Dir = n.env, n.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	return cmd
}

func (n *rabbitNode) ctl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := n.cmd(ctx, "rabbitmqctl", append([]string{"-q", "-n", n.name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %v: %w: %s", args, err, out)
	}
	return nil
}

// rabbitCredential is the rabbitmq user's when running as root (the node and its CLI
// tools share its Erlang cookie), with its home; nil and home otherwise.
func rabbitCredential(t *testing.T, home string) (*syscall.Credential, string) {
	if os.Geteuid() != 0 {
		return nil, home
	}
	u, err := user.Lookup("rabbitmq")
	if err != nil {
		t.Fatalf("running as root without a rabbitmq user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, u.HomeDir
}

// sharedRabbit is the node scripts/brokers.sh starts (rabbit@localhost, its
// environment as rabbit_env sets it).
func sharedRabbit(t *testing.T) *rabbitNode {
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmqctl")); err != nil {
		brokerproc.Require(t, "rabbitmqctl not found in %s", rabbitBin)
	}
	state := os.Getenv("BQ_STATE_DIR")
	if state == "" {
		state = "/tmp/babelqueue-brokers"
	}
	cred, home := rabbitCredential(t, filepath.Join(state, "rabbitmq"))
	return &rabbitNode{name: "rabbit@localhost", cred: cred, dir: os.TempDir(),
		env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "ERL_EPMD_ADDRESS=127.0.0.1"}}
}

func amqpBinding(t *testing.T, raw string, node *rabbitNode) *faultsuite.Binding {
	return &faultsuite.Binding{
		Name: "RabbitMQ",
		URL:  func(faultsuite.Role, string) string { return raw },
		BreakDLQ: func(ctx context.Context, queue, dlq string) (func(context.Context) error, error) {
			policy := "bqfaults-" + queue
			err := node.ctl(ctx, "set_policy", "--apply-to", "queues", "--priority", "100", policy,
				"^"+regexp.QuoteMeta(dlq)+"$", `{"max-length":0,"overflow":"reject-publish"}`)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return node.ctl(ctx, "clear_policy", policy) }, nil
		},
		DLQMethod: `a policy on the dead-letter queue, {"max-length":0,"overflow":"reject-publish"} (rabbitmqctl set_policy): ` +
			"RabbitMQ nacks every publish to it; healed by clearing the policy",
		// basic.qos counts every delivery not acknowledged, pipelined settlements included.
		Duplicates: heldWindow(prefetch, "the deliveries a consumer's channel holds unacknowledged (basic.qos = prefetch = "+
			"concurrency; pipelined settlements count against it): an acknowledgement lost with the connection redelivers"),
		Settings: "publisher confirms on (the default): a dead-letter write counts once RabbitMQ confirmed it; " +
			"unacknowledged deliveries come back when a connection dies, so a killed worker's are redelivered at once",
	}
}

// privateRabbit starts a RabbitMQ node of its own (Debian's rabbitmq-server, as
// scripts/brokers.sh installs it) on free ports, with its own Mnesia directory; the
// restart is a clean stop (SIGTERM) and a start on the same data. Durable queues and
// persistent messages survive it.
func privateRabbit(t *testing.T) *faultsuite.Binding {
	transporttest.BrokerURL(t, "BQ_AMQP_URL", "rabbitmq") // the shared broker's presence says RabbitMQ is installed here
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		brokerproc.Require(t, "rabbitmq-server not found in %s; a private node cannot be started", rabbitBin)
	}
	dir := privateDir(t, "rabbitmq")
	enterable(t, dir) // the node runs as the rabbitmq user when the test runs as root
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	port := brokerproc.FreePort(t)
	cred, home := rabbitCredential(t, dir)
	for _, d := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, int(cred.Uid), int(cred.Gid)) })
	}
	node := &rabbitNode{name: "bqfaults" + hex.EncodeToString(suffix[:]) + "@localhost", cred: cred, dir: dir}
	node.env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"RABBITMQ_NODENAME=" + node.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(brokerproc.FreePort(t, port)),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_PID_FILE=" + filepath.Join(dir, "rabbitmq.pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	}
	p := brokerproc.New(t, brokerproc.Config{
		Name:     "private RabbitMQ node",
		Command:  func() *exec.Cmd { return node.cmd(context.Background(), "rabbitmq-server") },
		Log:      filepath.Join(dir, "node.log"),
		Port:     port,
		Awaiting: "listen",
		Escalate: func() { _ = node.ctl(context.Background(), "shutdown") },
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	b := amqpBinding(t, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port), node)
	b.Stop = func() error { p.Stop(); return nil }
	b.Start = p.Start
	b.RestartMethod = "SIGTERM of a private RabbitMQ node (a clean shutdown), started again on its Mnesia directory"
	return b
}
