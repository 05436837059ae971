// Package faultproxy takes a broker away from a client and brings it back, without
// touching the broker: fault tests run against the brokers other test suites share, so
// they never stop them. A [Proxy] forwards loopback TCP connections to a target; while it
// is down it cuts every connection it forwards and closes new ones at once, as a broker
// that went away would. Its [Proxy.DialContext] gives the same switch to clients that
// find their broker's address themselves (a Kafka client dials the addresses the
// cluster's metadata names, not a proxy's). Only loopback targets are allowed.
//
// It uses the standard library only.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// ErrDown is returned by [Proxy.DialContext] while the proxy is down.
var ErrDown = errors.New("faultproxy: target is down")

// Proxy forwards TCP connections to one loopback target. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	down   bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New starts a proxy for target (host:port on a loopback address) listening on a free
// loopback port. It starts up.
func New(target string) (*Proxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// checkLoopback refuses any address that is not on the loopback interface.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("faultproxy: bad address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("faultproxy: %q is not a loopback address", addr)
	}
	return nil
}

// Addr is the host:port clients connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Down cuts every connection the proxy carries (and every one DialContext made) and
// makes new ones fail until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Up lets connections through again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// IsDown reports whether the proxy is down.
func (p *Proxy) IsDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// Close stops listening, cuts every connection and waits for the forwarding goroutines
// to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Down()
	p.wg.Wait()
	return err
}

// track remembers c so Down can cut it; it reports false (and closes c) while the proxy
// is down or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// forward copies bytes both ways between c and a new connection to the target until
// either side closes or Down cuts them.
func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	var d net.Dialer
	up, err := d.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One side ended: end the other, so neither copy outlives the pair.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// DialContext dials addr (which must be a loopback address) directly, not through the
// listener, and puts the connection under the proxy's switch: it fails with [ErrDown]
// while the proxy is down, and Down cuts it. Its signature is that of net.Dialer's, so
// it plugs into a client's dialer option (franz-go's kgo.Dialer, for one).
func (p *Proxy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	if p.IsDown() {
		return nil, fmt.Errorf("faultproxy: dial %s: %w", addr, ErrDown)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if !p.track(c) {
		return nil, fmt.Errorf("faultproxy: dial %s: %w", addr, ErrDown)
	}
	return &trackedConn{Conn: c, p: p}, nil
}

// trackedConn forgets itself on Close.
type trackedConn struct {
	net.Conn
	p    *Proxy
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.conns, c.Conn)
		c.p.mu.Unlock()
	})
	return err
}
