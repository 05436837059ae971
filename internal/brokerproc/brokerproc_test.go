package brokerproc

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTail(t *testing.T) {
	if got := Tail([]byte("abcdef"), 3); got != "def" {
		t.Errorf("Tail = %q, want def", got)
	}
	if got := Tail([]byte("ab"), 3); got != "ab" {
		t.Errorf("Tail = %q, want ab", got)
	}
}

func TestFreePortSkipsTaken(t *testing.T) {
	p := FreePort(t)
	for range 20 {
		if q := FreePort(t, p); q == p {
			t.Fatalf("FreePort returned the taken port %d", p)
		}
	}
}

// TestFreePortBelowEphemeralRange: the port is one no outgoing connection can take (below
// the kernel's ephemeral range), and never one a process listens on.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	from := ephemeralFrom() // where it starts at portHigh or below, FreePort asks the kernel
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 200 {
		p := FreePort(t)
		if from > portHigh && (p < portLow || p >= portHigh) {
			t.Fatalf("FreePort = %d, want a port in [%d, %d), below the ephemeral range from %d", p, portLow, portHigh, from)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v (returned while someone listens on it?)", p, err)
		}
		held = append(held, l) // held: a later pick must not return it
	}
}

func TestProcessExitsDuringStartUp(t *testing.T) {
	p := New(t, Config{
		Name:    "failing process",
		Command: func() *exec.Cmd { return exec.Command("sh", "-c", "echo the reason; exit 3") },
		Log:     filepath.Join(t.TempDir(), "node.log"),
		Ready:   func() error { return errors.New("not yet") },
		Poll:    10 * time.Millisecond,
	})
	err := p.Start()
	if err == nil || !strings.Contains(err.Error(), "failing process exited during start-up") || !strings.Contains(err.Error(), "the reason") {
		t.Fatalf("Start = %v, want the exit with the log tail", err)
	}
}

func TestProcessStopsOnSignal(t *testing.T) {
	p := New(t, Config{
		Name:    "sleeper",
		Command: func() *exec.Cmd { return exec.Command("sleep", "60") },
		Log:     filepath.Join(t.TempDir(), "node.log"),
		Ready:   func() error { return nil },
	})
	for range 2 { // a restart
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		p.Stop()
		if d := time.Since(t0); d > 10*time.Second {
			t.Fatalf("Stop took %s; SIGTERM should end sleep at once", d)
		}
	}
	p.Stop() // stopped already: nothing to do
}

func TestWorkloadAccounting(t *testing.T) {
	w := NewWorkload("q", "urn:fail", 3)
	w.Published(0, true)
	w.Published(1, false)
	if w.Accounted() {
		t.Fatal("accounted before anything was handled")
	}
	w.Handled(1)
	for a := range 3 {
		if err := w.Refuse(0, a); err == nil || err.Error() != "refused 0" {
			t.Fatalf("Refuse = %v", err)
		}
	}
	body := `{"job":"urn:fail","attempts":3,"data":{"n":0},"dead_letter":{"reason":"failed","original_queue":"q","attempts":3,"error":"refused 0"}}`
	for range 2 {
		if err := w.DeadLettered([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if !w.Accounted() {
		t.Fatal("not accounted after both messages were")
	}
	tl := w.Tally(t, func(n int, tried map[int]bool) {
		if n != 0 || len(tried) != 3 {
			t.Errorf("checkTried(%d, %v)", n, tried)
		}
	})
	if want := (Tally{Total: 2, Handled: 1, Dead: 1, DeadDups: 1}); tl != want {
		t.Errorf("Tally = %+v, want %+v", tl, want)
	}
	w.Verdict(t, tl)
}
