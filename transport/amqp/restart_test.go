package amqp

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
)

const rabbitBin = "/usr/lib/rabbitmq/bin"

// rabbitNode is a private RabbitMQ node the test starts and restarts on its own ports,
// so a restart never touches the broker other test suites share.
type rabbitNode struct {
	*brokerproc.Process
	port int
}

// startRabbitNode starts a second node (RabbitMQ's Debian package, as brokers.sh
// installs it). Without it the test skips, or fails under CI=true.
func startRabbitNode(t *testing.T) *rabbitNode {
	t.Helper()
	brokerURL(t) // the shared broker's presence says RabbitMQ is installed here
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		brokerproc.Require(t, "rabbitmq-server not found in %s; a second node cannot be started", rabbitBin)
	}
	dir, err := os.MkdirTemp("", "bqtest-rabbit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	name := "bqtest" + strings.ToLower(rand.Text()[:8]) + "@localhost"
	port := brokerproc.FreePort(t)
	home := dir
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("rabbitmq")
		if err != nil {
			t.Fatalf("running as root without a rabbitmq user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		home = u.HomeDir // the Erlang cookie the CLI tools share
	}
	for _, d := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
			return os.Chown(p, int(cred.Uid), int(cred.Gid))
		})
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"RABBITMQ_NODENAME=" + name,
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
	rabbit := func(ctx context.Context, bin string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(rabbitBin, bin), args...)
		cmd.Env, cmd.Dir = env, dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	n := &rabbitNode{port: port}
	n.Process = brokerproc.New(t, brokerproc.Config{
		Name:     "second RabbitMQ node",
		Command:  func() *exec.Cmd { return rabbit(context.Background(), "rabbitmq-server") },
		Log:      filepath.Join(dir, "node.log"),
		Port:     port,
		Awaiting: "listen",
		// SIGTERM (RabbitMQ shuts down cleanly on it), then rabbitmqctl shutdown, then
		// a kill if neither worked within 30s each.
		Escalate: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = rabbit(ctx, "rabbitmqctl", "-n", name, "shutdown").Run()
		},
	})
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *rabbitNode) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port) }

// TestBrokerRestartMidRun restarts a private RabbitMQ node while a producer publishes
// and four workers consume: the transport reconnects by itself, durable queues and
// persistent messages survive, and every message is acknowledged with none left over.
func TestBrokerRestartMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a RabbitMQ node (about 30s)")
	}
	node := startRabbitNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Dial(ctx, node.url(), WithLogger(testLogger(t)), WithConfirmTimeout(5*time.Second),
		WithConnectionName("bqtest-restart"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	// The restart runs beside the producer, so publishes hit the stopping and the
	// stopped broker, and workers hold unacknowledged deliveries when it goes down.
	restarted := make(chan error, 1)
	var done atomic.Bool
	accountedRun(t, tr, node.url(), "bqtest-restart", 400, func(i int) {
		switch {
		case i == 100:
			go func() {
				t.Log("restarting the RabbitMQ node")
				node.Stop()
				err := node.Start()
				t.Log("RabbitMQ node back")
				done.Store(true)
				restarted <- err
			}()
		case i > 100 && !done.Load():
			time.Sleep(10 * time.Millisecond) // keep publishing across the restart
		}
	})
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
}
