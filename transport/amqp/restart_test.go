package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const rabbitBin = "/usr/lib/rabbitmq/bin"

// rabbitNode is a private RabbitMQ node the test starts and restarts on its own ports,
// so a restart never touches the broker other test suites share.
type rabbitNode struct {
	t      *testing.T
	name   string
	port   int
	dir    string
	env    []string
	cred   *syscall.Credential
	cmd    *exec.Cmd
	exited chan struct{}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRabbitNode starts a second node (RabbitMQ's Debian package, as brokers.sh
// installs it). Without it the test skips, or fails under CI=true.
func startRabbitNode(t *testing.T) *rabbitNode {
	t.Helper()
	brokerURL(t) // the shared broker's presence says RabbitMQ is installed here
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		msg := "rabbitmq-server not found in " + rabbitBin + "; a second node cannot be started"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir, err := os.MkdirTemp("", "bqtest-rabbit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &rabbitNode{t: t, name: "bqtest" + randomHex(4) + "@localhost", port: freePort(t), dir: dir}
	home := dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("rabbitmq")
		if err != nil {
			t.Fatalf("running as root without a rabbitmq user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		n.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
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
	if n.cred != nil {
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
			return os.Chown(p, int(n.cred.Uid), int(n.cred.Gid))
		})
	}
	n.env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"RABBITMQ_NODENAME=" + n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(freePort(t)),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_PID_FILE=" + filepath.Join(dir, "rabbitmq.pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	}
	t.Cleanup(n.stop)
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *rabbitNode) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port) }

// start starts the node and waits until it listens. It does not call t.Fatal, so a
// test may restart the node from another goroutine.
func (n *rabbitNode) start() error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
	cmd.Env, cmd.Dir = n.env, n.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}(n.exited)
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-n.exited:
			log, _ := os.ReadFile(filepath.Join(n.dir, "node.log"))
			return fmt.Errorf("second RabbitMQ node exited during start-up:\n%s", tail(log, 3000))
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("second RabbitMQ node did not listen within 90s")
		}
	}
}

// stop shuts the node down: SIGTERM (RabbitMQ shuts down cleanly on it), then
// rabbitmqctl shutdown, then a kill if neither worked within 30s each.
func (n *rabbitNode) stop() {
	if n.cmd == nil {
		return
	}
	defer func() { n.cmd = nil }()
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
		return
	case <-time.After(30 * time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := exec.CommandContext(ctx, filepath.Join(rabbitBin, "rabbitmqctl"), "-n", n.name, "shutdown")
	ctl.Env, ctl.Dir = n.env, n.dir
	ctl.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	_ = ctl.Run()
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

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
				node.stop()
				err := node.start()
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
