package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Run consumes the queue of tr with the configured number of workers until ctx ends.
// Then it stops receiving, lets in-flight handlers finish within the shutdown grace,
// settles them, and returns nil. Deliveries whose handler is still running after the
// grace are given back to the broker. A receive that fails is logged and retried with a
// backoff of up to 2 s; Run returns an error only when the consumer cannot be opened or
// is closed under it. The caller makes sure that one Run runs at a time.
func (p *Pool[M]) Run(ctx context.Context, tr transport.Transport) error {
	defer p.status.consuming.Store(false)
	cfg := &p.cfg
	c, err := tr.Consume(ctx, cfg.Queue, p.consumeOptions())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("babelqueue: consume %q: %w", cfg.Queue, err)
	}
	p.status.lastRecvErr.Store(nil)
	p.status.consuming.Store(true)
	cfg.Log.Info("babelqueue: consuming", "queue", cfg.Queue, "workers", cfg.Concurrency)

	var (
		active   sync.WaitGroup
		fatalMu  sync.Mutex
		fatalErr error
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	workers := make([]*worker[M], cfg.Concurrency)
	for i := range workers {
		w := newWorker(p, runCtx, c, &active)
		workers[i] = w
		active.Add(1)
		go func() {
			if err := w.loop(); err != nil {
				fatalMu.Lock()
				if fatalErr == nil {
					fatalErr = err
				}
				fatalMu.Unlock()
				stop()
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { active.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-runCtx.Done():
		// Stop receiving; in-flight handlers get the shutdown grace to finish.
		grace := time.NewTimer(cfg.ShutdownGrace)
		select {
		case <-allDone:
		case <-grace.C:
			for _, w := range workers {
				w.abandon()
			}
			<-allDone // the workers still settling finish within the settle timeout
		}
		grace.Stop()
	}
	p.status.consuming.Store(false)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.SettleTimeout)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		cfg.Log.Warn("babelqueue: closing the consumer", "queue", cfg.Queue, "error", err)
	}
	cfg.Log.Info("babelqueue: stopped", "queue", cfg.Queue)
	return fatalErr
}

// worker is one of Run's goroutines: it receives, runs the handler on its own goroutine
// (or, with a handler timeout, on one it watches) and settles. What it shares with Run
// is the hand-over at the end of the shutdown grace (abandon).
type worker[M any] struct {
	p        *Pool[M]
	ctx      context.Context // ends when Run stops receiving
	c        transport.Consumer
	active   *sync.WaitGroup
	detached context.Context // handlers and settlements outlive ctx

	// hctx is the base of every handler context: cancelled when the worker is
	// abandoned or exits.
	hctx    context.Context
	hcancel context.CancelFunc

	// The settle context is reused while it has at least half of the settle timeout
	// left, so a settlement does not cost a timer.
	sctx      context.Context
	scancel   context.CancelFunc
	sdeadline time.Time

	// answer reads a handler's error (App.AnswerReader): this worker's own.
	answer func(error) (settle.Kind, time.Duration, error)

	mu        sync.Mutex
	current   delivery[M] // the delivery whose handler runs, when busy
	busy      bool
	abandoned bool
	released  bool // active.Done was called
}

func newWorker[M any](p *Pool[M], ctx context.Context, c transport.Consumer, active *sync.WaitGroup) *worker[M] {
	w := &worker[M]{p: p, ctx: ctx, c: c, active: active, detached: context.WithoutCancel(ctx), answer: p.app.AnswerReader()}
	w.hctx, w.hcancel = context.WithCancel(w.detached)
	return w
}

// release marks the worker finished for Run, once.
func (w *worker[M]) release() {
	if !w.released {
		w.released = true
		w.active.Done()
	}
}

// abandon is called by Run when the shutdown grace ran out: a delivery whose handler
// still runs is given back to the broker (its route is a rewind: settle.Facts.Abandoned),
// the handler's context is cancelled, and Run no longer waits for this worker. When the
// handler returns at last, nothing more is done with its delivery.
func (w *worker[M]) abandon() {
	w.mu.Lock()
	x := w.current
	if !w.busy || w.abandoned {
		w.mu.Unlock()
		return
	}
	w.abandoned = true
	w.release()
	w.mu.Unlock()
	w.hcancel()
	cfg := &w.p.cfg
	cfg.Log.Warn("babelqueue: handler outlived the shutdown grace; giving the delivery back to the broker",
		"queue", x.D.Queue, "urn", x.Route, "id", x.id())
	ctx, cancel := context.WithTimeout(w.detached, cfg.SettleTimeout)
	defer cancel()
	x.Facts.Abandoned = true
	route := settle.Decide(x.Facts, cfg.Policy, cfg.Caps)
	w.settle(ctx, x, &route, time.Time{}) // hooks see the delivery given back
}

func (w *worker[M]) loop() error {
	defer func() {
		w.mu.Lock()
		w.release()
		w.mu.Unlock()
		w.hcancel()
		if w.scancel != nil {
			w.scancel()
		}
	}()
	p := w.p
	cfg := &p.cfg
	// At most 2 s: the workers resume within about 2 s of the broker coming back.
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for w.ctx.Err() == nil {
		d, err := w.c.Receive(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, transport.ErrClosed) {
				return fmt.Errorf("babelqueue: consumer of %q closed: %w", cfg.Queue, err)
			}
			p.status.consuming.Store(false)
			p.status.lastRecvErr.Store(&receiveFailure{err: err, at: cfg.Now()})
			cfg.Log.Warn("babelqueue: receive failed; retrying", "queue", cfg.Queue, "error", err, "backoff", backoff)
			if p.obs.ReceiveError {
				p.hooks.ReceiveFailed(w.ctx, cfg.Queue, err, backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-w.ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		if backoff != minBackoff {
			backoff = minBackoff
			cfg.Log.Info("babelqueue: receiving again", "queue", cfg.Queue)
		}
		if !p.status.consuming.Load() {
			p.status.consuming.Store(true)
		}
		now := time.Now()
		p.status.lastReceived.Store(now.UnixNano())
		if !w.process(d, now) {
			return nil // abandoned at the end of the shutdown grace
		}
	}
	return nil
}

// settleContext is the context of one settlement: at least half the settle timeout,
// at most all of it.
func (w *worker[M]) settleContext(now time.Time) context.Context {
	limit := w.p.cfg.SettleTimeout
	if w.sctx == nil || w.sdeadline.Sub(now) < limit/2 || w.sctx.Err() != nil {
		if w.scancel != nil {
			w.scancel()
		}
		w.sctx, w.scancel = context.WithTimeout(w.detached, limit)
		w.sdeadline = now.Add(limit)
	}
	return w.sctx
}
