package settlepipe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

func TestPipeBoundsAndWaits(t *testing.T) {
	var all Inflight
	p := New(2, &all)
	ctx := context.Background()
	if err := p.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	full, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.Acquire(full); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third Acquire on a pipe of 2 = %v, want it to wait until its context ends", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if p.Wait(short) || all.Wait(short) {
		t.Fatal("Wait reported drained with two settlements in flight")
	}
	done := make(chan bool)
	go func() { done <- p.Wait(ctx) && all.Wait(ctx) }()
	p.Release()
	p.Release()
	if !<-done {
		t.Fatal("Wait did not report the pipe drained")
	}
	if err := p.Acquire(ctx); err != nil {
		t.Fatalf("Acquire after the releases: %v", err)
	}
}

func TestPipeBackoff(t *testing.T) {
	p := New(1, nil)
	ctx := context.Background()
	if err := p.Pause(ctx, nil); err != nil {
		t.Fatalf("Pause with nothing failed = %v", err)
	}
	var pauses []time.Duration
	for range 8 {
		_, d := p.Failed()
		pauses = append(pauses, d)
	}
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000}
	for i, d := range pauses {
		if d != want[i]*time.Millisecond {
			t.Fatalf("pauses %v, want %v ms", pauses, want)
		}
	}
	done := make(chan struct{})
	close(done)
	if err := p.Pause(ctx, done); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Pause after failures with done closed = %v, want ErrClosed", err)
	}
	if n := p.Succeeded(); n != 8 {
		t.Fatalf("Succeeded after 8 failures = %d", n)
	}
	if n := p.Succeeded(); n != 0 {
		t.Fatalf("Succeeded again = %d, want 0", n)
	}
	if err := p.Pause(ctx, done); err != nil {
		t.Fatalf("Pause after a success = %v, want no wait", err)
	}
}
