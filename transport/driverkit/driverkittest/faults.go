// Package driverkittest helps test a driver built on [driverkit]: [Faults] makes a
// driver's primitives fail or hang on demand and counts their calls, [Wrap] puts the
// faults between the kit and a driver, and [Fake] is a small in-process broker with a
// driver of its own, on which the kit itself is tested.
//
// A driver's own test injects faults by building its consumer with the driver wrapped:
//
//	f := new(driverkittest.Faults)
//	f.Fail(driverkittest.OpConfirm, errors.New("nacked"), 1) // the next confirmation fails
//	k, err := driverkit.New(driverkittest.Wrap[msg](c, f), cfg, opts)
//	c.kit = k
//
// The package is for tests; it imports only the standard library and the kit.
package driverkittest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Op names a driver primitive that [Faults] can make fail.
type Op string

// The primitives of [driverkit.Driver] and its optional interfaces.
const (
	OpReceive   Op = "receive"
	OpAck       Op = "ack"
	OpGiveBack  Op = "give back"
	OpWrite     Op = "write"
	OpConfirm   Op = "confirm"
	OpAckWrites Op = "ack writes"
	OpHandOff   Op = "hand off"
	OpClose     Op = "close"
)

// ErrTransient is the error [Fake]'s driver reports as retryable: inject it into
// OpReceive for a receive failure the kit retries.
var ErrTransient = errors.New("driverkittest: transient broker failure")

// Faults makes primitives fail or hang on demand and counts every call. The zero value
// injects nothing. It is safe for concurrent use.
type Faults struct {
	mu    sync.Mutex
	rules map[Op]*rule
	calls map[Op]int
}

type rule struct {
	err  error
	left int           // calls still to fail; negative: every call
	hang chan struct{} // calls wait until it is closed (or their ctx ends)
}

// Fail makes the next times calls of op return err (every call, until [Faults.Heal],
// when times is negative).
func (f *Faults) Fail(op Op, err error, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.ruleLocked(op)
	r.err, r.left = err, times
}

// Hang makes the calls of op wait until release is called or their context ends (then
// they fail with the context's error): a broker that stops answering.
func (f *Faults) Hang(op Op) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.ruleLocked(op).hang = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if r := f.rules[op]; r != nil && r.hang == ch {
				r.hang = nil
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

// Heal stops every fault of op (calls hanging now are not released: call the release
// function Hang returned).
func (f *Faults) Heal(op Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rules, op)
}

// Calls counts the calls of op made so far, failed or not.
func (f *Faults) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *Faults) ruleLocked(op Op) *rule {
	if f.rules == nil {
		f.rules = map[Op]*rule{}
	}
	r := f.rules[op]
	if r == nil {
		r = &rule{}
		f.rules[op] = r
	}
	return r
}

// hit counts a call of op and applies its fault: it waits while op hangs, then returns
// the injected error or nil.
func (f *Faults) hit(ctx context.Context, op Op) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[Op]int{}
	}
	f.calls[op]++
	var hang chan struct{}
	var err error
	if r := f.rules[op]; r != nil {
		hang = r.hang
		if r.err != nil && r.left != 0 {
			err = r.err
			if r.left > 0 {
				r.left--
			}
		}
	}
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// Wrap returns d with f's faults between it and the kit: each primitive first counts
// the call and applies op's fault, then calls d's. The result implements every optional
// interface of the kit; one that d does not implement fails when called (give the kit
// the Config d supports). A Confirm that d's Write returns is wrapped too (OpConfirm).
func Wrap[M any](d driverkit.Driver[M], f *Faults) driverkit.Driver[M] {
	return &faulty[M]{d: d, f: f}
}

type faulty[M any] struct {
	d driverkit.Driver[M]
	f *Faults
}

func (w *faulty[M]) Receive(ctx context.Context, into []M) (int, error) {
	if err := w.f.hit(ctx, OpReceive); err != nil {
		return 0, err
	}
	return w.d.Receive(ctx, into)
}

func (w *faulty[M]) Decode(m M, d *transport.Delivery) { w.d.Decode(m, d) }

func (w *faulty[M]) Ack(ctx context.Context, m M) error {
	if err := w.f.hit(ctx, OpAck); err != nil {
		return err
	}
	return w.d.Ack(ctx, m)
}

func (w *faulty[M]) GiveBack(ctx context.Context, ms []M, why driverkit.Reason) error {
	if err := w.f.hit(ctx, OpGiveBack); err != nil {
		return err
	}
	return w.d.GiveBack(ctx, ms, why)
}

func (w *faulty[M]) IsRetryable(err error) bool { return w.d.IsRetryable(err) }

func (w *faulty[M]) Close(ctx context.Context) error {
	err := w.f.hit(ctx, OpClose)
	if cerr := w.d.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

func (w *faulty[M]) Write(ctx context.Context, m M, ws []*transport.Message) (driverkit.Confirm, error) {
	wr, ok := w.d.(driverkit.Writer[M])
	if !ok {
		return nil, fmt.Errorf("driverkittest: %T has no Write", w.d)
	}
	if err := w.f.hit(ctx, OpWrite); err != nil {
		return nil, err
	}
	confirm, err := wr.Write(ctx, m, ws)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := w.f.hit(ctx, OpConfirm); err != nil {
			return err
		}
		if confirm == nil {
			return nil
		}
		return confirm(ctx)
	}, nil
}

func (w *faulty[M]) AckWrites(ctx context.Context, m M, ws []*transport.Message) error {
	a, ok := w.d.(driverkit.AtomicAcker[M])
	if !ok {
		return fmt.Errorf("driverkittest: %T has no AckWrites", w.d)
	}
	if err := w.f.hit(ctx, OpAckWrites); err != nil {
		return err
	}
	return a.AckWrites(ctx, m, ws)
}

func (w *faulty[M]) HandOff(ctx context.Context, m M) error {
	h, ok := w.d.(driverkit.HandOffer[M])
	if !ok {
		return fmt.Errorf("driverkittest: %T has no HandOff", w.d)
	}
	if err := w.f.hit(ctx, OpHandOff); err != nil {
		return err
	}
	return h.HandOff(ctx, m)
}
