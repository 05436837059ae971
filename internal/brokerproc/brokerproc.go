// Package brokerproc is what the transports' restart tests share: they start a private
// broker process on free loopback ports, stop it mid-run and start it again, so a
// restart never touches the brokers other test suites share. Each test keeps its
// broker's own set-up (configuration files, class path, credentials); this package
// picks the ports, gates on prerequisites, runs and stops the process, and keeps the
// bookkeeping of the workload (see Workload). It uses the standard library only.
package brokerproc

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port nobody listens on right now and that is none of
// taken (ports the caller picked already but does not listen on yet). It picks at random
// between portLow and portHigh: below the kernel's ephemeral range, from which every
// outgoing connection on the machine takes its local port, so none can take the port
// between this pick and the broker's listen (seen in CI with ports from the ephemeral
// range: "port … is taken by another process"), and clear of the fixed ports of
// scripts/brokers.sh. On a machine whose ephemeral range reaches that low, it asks the
// kernel for a port as before.
func FreePort(t testing.TB, taken ...int) int {
	t.Helper()
	if ephemeralFrom() > portHigh {
		for range 1000 {
			p := portLow + rand.IntN(portHigh-portLow)
			if slices.Contains(taken, p) {
				continue
			}
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
				_ = l.Close()
				return p
			}
		}
	}
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !slices.Contains(taken, p) {
			return p
		}
	}
}

// portLow and portHigh bound the ports FreePort picks (portHigh excluded). A Redis
// Cluster node also listens on its port plus 10000 (its bus): 21000–24999 is clear of the
// fixed ports too.
const portLow, portHigh = 11000, 15000

// ephemeralFrom returns the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), 0 when it cannot be read.
func ephemeralFrom() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// Require reports a missing prerequisite (a binary, a cached distribution): it fails
// the test under CI=true, where integration tests never skip, and skips it elsewhere.
func Require(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: integration tests never skip)", msg)
	}
	t.Skip(msg)
}

// Tail returns the last n bytes of b (all of b if it is shorter) as a string, for a
// process log in a failure message.
func Tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestLogger returns a logger that writes level and above to the test log, one
// t.Log per record; with BQ_TEST_DEBUG=1 it writes everything.
func TestLogger(t testing.TB, level slog.Level) *slog.Logger {
	if os.Getenv("BQ_TEST_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: level}))
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Config describes a broker process for New. Command and Log are required, and
// either Port or Ready.
type Config struct {
	// Name names the process in errors: "private Kafka".
	Name string
	// Command returns a fresh command for each start. Its Stdout and Stderr are set to
	// the log; everything else (Dir, Env, SysProcAttr) is the caller's.
	Command func() *exec.Cmd
	// Log is the file the process writes to; every start appends to it.
	Log string

	// Port is the loopback TCP port that answers once the process is up, tried with
	// DialTimeout (1s if zero) per attempt. Ready replaces the port check when set: it
	// makes one attempt and returns nil once the process is up.
	Port        int
	DialTimeout time.Duration
	Ready       func() error
	// StartTimeout bounds the wait for the process to be up (90s if zero), Poll is the
	// pause between attempts (250ms if zero), and Awaiting says what it waits for in
	// the error when it is not up in time: "<Name> did not <Awaiting> within 90s"
	// ("answer" if empty).
	StartTimeout time.Duration
	Poll         time.Duration
	Awaiting     string

	// Signal stops the process (SIGTERM if nil). Stop waits Grace (30s if zero) for it
	// to exit; then, if Escalate is set, calls it and waits Grace again; then kills it.
	Signal   os.Signal
	Grace    time.Duration
	Escalate func()
}

// Process is a broker process a test starts, stops and starts again. Its methods are
// safe for concurrent use and never call t.Fatal, so a test may restart the process
// from another goroutine.
type Process struct {
	c Config

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited and the log is closed
}

// New returns a process described by c, not started yet; t.Cleanup stops it at the
// end of the test.
func New(t testing.TB, c Config) *Process {
	t.Helper()
	if c.DialTimeout == 0 {
		c.DialTimeout = time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 90 * time.Second
	}
	if c.Poll == 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.Awaiting == "" {
		c.Awaiting = "answer"
	}
	if c.Signal == nil {
		c.Signal = syscall.SIGTERM
	}
	if c.Grace == 0 {
		c.Grace = 30 * time.Second
	}
	p := &Process{c: c}
	t.Cleanup(p.Stop)
	return p
}

// Start starts the process with its output appended to the log and waits until it is
// up. If the process exits first, the error holds the last 3000 bytes of its log.
func (p *Process) Start() error {
	logf, err := os.OpenFile(p.c.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := p.c.Command()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	ready := p.c.Ready
	if ready == nil {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.c.Port))
		ready = func() error {
			c, err := net.DialTimeout("tcp", addr, p.c.DialTimeout)
			if err == nil {
				_ = c.Close()
			}
			return err
		}
	}
	deadline := time.Now().Add(p.c.StartTimeout)
	for {
		if ready() == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited during start-up:\n%s", p.c.Name, p.LogTail(3000))
		case <-time.After(p.c.Poll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not %s within %ds", p.c.Name, p.c.Awaiting, int(p.c.StartTimeout/time.Second))
		}
	}
}

// Stop stops the process if it runs: Signal, then Escalate, then a kill, each after
// Grace; it returns once the process has exited. Stopping a stopped process does
// nothing.
func (p *Process) Stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(p.c.Signal)
	select {
	case <-exited:
		return
	case <-time.After(p.c.Grace):
	}
	if p.c.Escalate != nil {
		p.c.Escalate()
		select {
		case <-exited:
			return
		case <-time.After(p.c.Grace):
		}
	}
	_ = cmd.Process.Kill()
	<-exited
}

// LogTail returns the last n bytes of the process log.
func (p *Process) LogTail(n int) string {
	b, _ := os.ReadFile(p.c.Log)
	return Tail(b, n)
}
