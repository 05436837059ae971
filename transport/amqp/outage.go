package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// What the transport does while the broker is away: a connection that goes silent is
// found dead within 1.5 heartbeats (liveConn), and Publish waits for a new one
// (rideOut), making again only a write the broker cannot have received.

// liveConn is the socket under a connection the transport dialled. amqp091 sets a read
// deadline of 1.5 heartbeats after every frame it reads; when one passes, liveConn
// closes the socket, so that a write blocked on a dead network fails too (amqp091's
// shutdown waits for it), and names the cause, which the transport logs.
type liveConn struct {
	net.Conn
	bound atomic.Int64 // 1.5 heartbeats once the connection is open; 0 before, or without heartbeats
}

// opened arms c for a connection open with heartbeat, and sets a first read deadline:
// amqp091 clears the handshake's deadline once open, possibly after its heartbeater set
// the first one.
func (c *liveConn) opened(heartbeat time.Duration) {
	if bound := 3 * heartbeat / 2; bound > 0 {
		c.bound.Store(int64(bound))
		_ = c.Conn.SetReadDeadline(time.Now().Add(bound))
	}
}

func (c *liveConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if bound := time.Duration(c.bound.Load()); bound > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		_ = c.Conn.Close()
		err = fmt.Errorf("amqp: no frame from the broker for %s (1.5 heartbeats): the connection is dead", bound)
	}
	return n, err
}

// unsent wraps the error of a write that cannot have reached the broker: the
// connection was lost, or could not be made, before the publish was written. Publish
// makes such a write again once the connection is back.
type unsent struct{ err error }

func (e unsent) Error() string { return e.err.Error() }
func (e unsent) Unwrap() error { return e.err }

func isUnsent(err error) bool {
	var u unsent
	return errors.As(err, &u)
}

// lostWith marks err, the failure of a step on conn before a publish was written,
// unsent when the connection or the channel was lost; a refusal by a live broker stays
// final.
func lostWith(conn *amqp091.Connection, err error) error {
	if errors.Is(err, amqp091.ErrClosed) || conn.IsClosed() {
		return unsent{err}
	}
	return err
}

// unsentUnlessFinal marks the error of a failed dial unsent, unless dialling again
// cannot help: the broker refused the login, the vhost or the connection, or the
// broker's certificate was refused.
func unsentUnlessFinal(err error) error {
	var ae *amqp091.Error
	var cve *tls.CertificateVerificationError
	switch {
	case err == nil:
		return unsent{errors.New("amqp: no connection")}
	case errors.As(err, &ae) && (ae.Code == amqp091.AccessRefused || ae.Code == amqp091.NotAllowed), errors.As(err, &cve):
		return err
	}
	return unsent{err}
}

// connected reports whether the transport has a live connection now.
func (t *Transport) connected() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn != nil && !t.conn.IsClosed()
}

// rideOut runs write until it succeeds or fails for another reason than a lost
// connection. While write fails unsent, rideOut tries again after a backoff (50 ms
// doubling to 1 s), for up to the publish wait and until ctx ends; then it fails with
// context.DeadlineExceeded (or ctx's error) wrapped with the broker's last error. write
// gets the context that bounds its wait for a connection. queue names the publish in
// the error ("" for a batch).
func (t *Transport) rideOut(ctx context.Context, queue string, write func(wait context.Context) error) error {
	var last error
	if t.connected() {
		if last = write(ctx); !isUnsent(last) {
			return last
		}
	}
	wait, cancel := context.WithTimeout(ctx, t.s.publishWait)
	defer cancel()
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := write(wait)
		if !isUnsent(err) {
			return err
		}
		if wait.Err() == nil {
			last = err
			select {
			case <-wait.Done():
			case <-time.After(backoff):
				continue
			}
		}
		if last == nil {
			t.mu.Lock()
			last = unsentUnlessFinal(t.lastErr)
			t.mu.Unlock()
		}
		what := "a batch"
		if queue != "" {
			what = fmt.Sprintf("to %q", queue)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("amqp: publish %s: %w while waiting for the connection; the broker's last error: %w", what, err, last)
		}
		return fmt.Errorf("amqp: publish %s: no connection within %s (publish_wait): %w; the broker's last error: %w",
			what, t.s.publishWait, context.DeadlineExceeded, last)
	}
}
