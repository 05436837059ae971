package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// serve listens on a loopback port until the test ends, runs handle on each connection
// it accepts (closing it after), and returns the address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	return serve(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func mustEcho(t *testing.T, c net.Conn, line string) {
	t.Helper()
	got, err := roundTrip(c, line)
	if err != nil || got != line {
		t.Fatalf("echo %q: got %q, %v", line, got, err)
	}
}

// dialVia connects to target through p: through its listener, or its DialContext (via
// "dialer"); the connection is closed when the test ends.
func dialVia(t *testing.T, p *Proxy, via, target string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if via == "listener" {
		c, err = net.Dial("tcp", p.Addr())
	} else {
		c, err = p.DialContext(context.Background(), "tcp", target)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Down cuts the connections the proxy carries and fails new ones, through its listener
// and through its dialer alike; Up lets new ones through again.
func TestDownAndUp(t *testing.T) {
	for _, via := range []string{"listener", "dialer"} {
		t.Run(via, func(t *testing.T) {
			target := echoServer(t)
			p, err := New(target)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			dial := func() (net.Conn, error) {
				if via == "listener" {
					return net.Dial("tcp", p.Addr())
				}
				return p.DialContext(context.Background(), "tcp", target)
			}
			mustDial := func() net.Conn {
				c, err := dial()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}

			c := mustDial()
			mustEcho(t, c, "before")
			p.Down()
			if _, err := roundTrip(c, "during"); err == nil {
				t.Fatal("a connection carried across Down still answers")
			}
			c2, err := dial()
			switch {
			case err == nil:
				defer c2.Close()
				if _, err := roundTrip(c2, "new while down"); err == nil {
					t.Fatal("a connection made while down answers")
				}
			case via == "dialer" && !errors.Is(err, ErrDown):
				t.Fatalf("dial while down: got %v, want ErrDown", err)
			}
			p.Up()
			mustEcho(t, mustDial(), "after")
		})
	}
}

func TestOnlyLoopback(t *testing.T) {
	for _, addr := range []string{"10.0.0.1:6379", "example.com:80", "no-port"} {
		if _, err := New(addr); err == nil {
			t.Errorf("New(%q) accepted a target off the loopback", addr)
		}
	}
	p, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.DialContext(context.Background(), "tcp", "192.168.1.1:9092"); err == nil {
		t.Error("DialContext dialled an address off the loopback")
	}
}

// Freeze keeps every connection open and silent, through the listener and the dialer
// alike: a round trip times out at the client's deadline, a connection made meanwhile
// is accepted and silent too, and after Thaw both answer again on the same connections.
func TestFreezeAndThaw(t *testing.T) {
	for _, via := range []string{"listener", "dialer"} {
		t.Run(via, func(t *testing.T) {
			target := echoServer(t)
			p, err := New(target)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			dial := func() net.Conn { return dialVia(t, p, via, target) }
			silent := func(c net.Conn, line string) {
				t.Helper()
				_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
				_, _ = io.WriteString(c, line+"\n")
				buf := make([]byte, 64)
				n, err := c.Read(buf)
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("a frozen connection answered %q (err %v), want a read timeout", buf[:n], err)
				}
			}

			c := dial()
			mustEcho(t, c, "before")
			p.Freeze()
			if via == "listener" {
				// Bytes sent while frozen are held, and arrive after Thaw.
				silent(c, "held")
				c2 := dial()
				silent(c2, "new while frozen")
				p.Thaw()
				for _, held := range []struct {
					c    net.Conn
					line string
				}{{c, "held"}, {c2, "new while frozen"}} {
					_ = held.c.SetDeadline(time.Now().Add(5 * time.Second))
					got, err := bufio.NewReader(held.c).ReadString('\n')
					if err != nil || got != held.line+"\n" {
						t.Fatalf("after Thaw: got %q, %v; want %q, held while frozen", got, err, held.line)
					}
				}
				mustEcho(t, c2, "after")
				return
			}
			_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := io.WriteString(c, "held\n"); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a write through a frozen dialer connection: %v, want a timeout", err)
			}
			p.Thaw()
			mustEcho(t, c, "after")
		})
	}
}

// Down cuts a frozen connection at once.
func TestDownCutsFrozen(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustEcho(t, c, "before")
	p.Freeze()
	_, _ = io.WriteString(c, "held\n")
	p.Down()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 8)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a frozen connection that Down cut: %v, want it closed", err)
	}
}

// Strand leaves the connections open at that moment silent for good, through the
// listener and the dialer alike, while connections made afterwards pass: a client that
// finds its old connection dead and dials again is served.
func TestStrand(t *testing.T) {
	for _, via := range []string{"listener", "dialer"} {
		t.Run(via, func(t *testing.T) {
			target := echoServer(t)
			p, err := New(target)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			dial := func() net.Conn { return dialVia(t, p, via, target) }
			old := dial()
			mustEcho(t, old, "before")
			p.Freeze()
			p.Strand()
			fresh := dial()
			mustEcho(t, fresh, "fresh")
			for range 2 { // still silent after a while: it never thaws
				_ = old.SetDeadline(time.Now().Add(300 * time.Millisecond))
				_, _ = io.WriteString(old, "lost\n")
				buf := make([]byte, 64)
				if n, err := old.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("a stranded connection answered %q (err %v), want a timeout", buf[:n], err)
				}
			}
			mustEcho(t, fresh, "fresh again")
			// A second Freeze freezes the fresh connection; Thaw frees it, not the old one.
			p.Freeze()
			p.Thaw()
			mustEcho(t, fresh, "after thaw")
			_ = old.SetDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := old.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Thaw freed a stranded connection: %v", err)
			}
			_ = old.Close() // the forwarding of a stranded pair ends with it (Close waits for it)
		})
	}
}

// Bytes held by a freeze never reach the target once Strand strands their connection,
// whatever was waiting for the thaw when it came: a read of the client's bytes waiting
// in the listener's copy, or a Write waiting in a dialled connection.
func TestStrandDropsWhatTheFreezeHeld(t *testing.T) {
	for _, via := range []string{"listener", "dialer"} {
		t.Run(via, func(t *testing.T) {
			lines := make(chan string, 16)
			target := serve(t, func(c net.Conn) {
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					lines <- l
				}
			})
			p, err := New(target)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			dial := func() net.Conn { return dialVia(t, p, via, target) }
			old := dial()
			p.Freeze()
			go func() { _, _ = io.WriteString(old, "held\n") }() // a dialled connection's Write waits for the thaw
			time.Sleep(200 * time.Millisecond)                   // the held bytes wait in the proxy
			p.Strand()
			_, _ = io.WriteString(dial(), "fresh\n")
			select {
			case l := <-lines:
				if l != "fresh\n" {
					t.Fatalf("the target got %q first, want only the fresh connection's line", l)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the fresh connection's line never arrived")
			}
			select {
			case l := <-lines:
				t.Fatalf("the target got %q through a stranded connection", l)
			case <-time.After(500 * time.Millisecond):
			}
			_ = old.Close()
		})
	}
}

// StartURL points a URL at a proxy of its host, keeping the rest of it; the proxy
// carries traffic and is closed once its test ends (nothing listens on its address).
func TestStartURL(t *testing.T) {
	target := echoServer(t)
	var addr string
	t.Run("in a test", func(t *testing.T) {
		p, proxied := StartURL(t, "redis://user:secret@"+target+"/0?x=1")
		addr = p.Addr()
		if want := "redis://user:secret@" + addr + "/0?x=1"; proxied != want {
			t.Fatalf("StartURL = %q, want %q", proxied, want)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		mustEcho(t, c, "through")
	})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("the proxy at %s still takes connections after its test ended", addr)
	}
}
