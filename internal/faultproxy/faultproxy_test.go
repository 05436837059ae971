package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
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
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
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
