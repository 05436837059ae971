package driverkit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Confirmations gathers the outcomes of the n writes of one settlement, for a driver
// whose client reports each write through a callback (a delivery promise): it ends once,
// with nil when every write is confirmed, else with the first failure, or with
// context.DeadlineExceeded when they are not all confirmed within its timeout. Its Wait
// is the [Confirm] of [Writer.Write]; given a notify function it calls that instead, the
// done callback of [AsyncWriter.WriteAsync].
type Confirmations struct {
	left   atomic.Int32
	once   sync.Once
	err    error
	done   chan struct{}
	notify func(error)
	fail   func(i int, err error) error
	timer  atomic.Pointer[time.Timer]
}

// NewConfirmations returns the confirmations of n writes (n ≥ 1). fail maps the failure
// of write i to the result (a [*transport.SettleWriteError] naming its queue, say); it
// runs on a goroutine of its own, so it may call the broker. notify, when not nil, gets
// the result; else Wait returns it.
func NewConfirmations(n int, timeout time.Duration, fail func(i int, err error) error, notify func(error)) *Confirmations {
	c := &Confirmations{notify: notify, fail: fail}
	c.left.Store(int32(n))
	if notify == nil {
		c.done = make(chan struct{})
	}
	c.timer.Store(time.AfterFunc(timeout, func() { c.Report(0, context.DeadlineExceeded) }))
	return c
}

// Report records the outcome of write i: nil once it is confirmed, else its failure.
func (c *Confirmations) Report(i int, err error) {
	if err == nil && c.left.Add(-1) > 0 {
		return
	}
	c.once.Do(func() {
		if t := c.timer.Load(); t != nil {
			t.Stop()
		}
		if err == nil {
			c.end()
			return
		}
		go func() {
			c.err = c.fail(i, err)
			c.end()
		}()
	})
}

func (c *Confirmations) end() {
	if c.notify != nil {
		c.notify(c.err)
		return
	}
	close(c.done)
}

// Wait waits for the result; when ctx ends first the confirmations fail with ctx.Err()
// (as write 0's failure). It is for confirmations made without notify.
func (c *Confirmations) Wait(ctx context.Context) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		c.Report(0, ctx.Err())
		<-c.done
	}
	return c.err
}
