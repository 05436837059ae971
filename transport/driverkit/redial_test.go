package driverkit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

type fakeConn struct {
	id   int
	dead atomic.Bool
}

// redialer returns a Redialer around a first connection, whose dials run dial, and the
// record of the connections installed (old, new) and released.
func redialer(dial func(ctx context.Context, n int) (*fakeConn, error)) (*driverkit.Redialer[*fakeConn], *fakeConn, func() ([][2]*fakeConn, []*fakeConn)) {
	var mu sync.Mutex
	var installed [][2]*fakeConn
	var released []*fakeConn
	var dials atomic.Int32
	r := &driverkit.Redialer[*fakeConn]{
		Live:      func(c *fakeConn) bool { return !c.dead.Load() },
		Installed: func(old, c *fakeConn) { mu.Lock(); installed = append(installed, [2]*fakeConn{old, c}); mu.Unlock() },
		Release:   func(c *fakeConn) { mu.Lock(); released = append(released, c); mu.Unlock() },
		Timeout:   time.Second,
		Backoff:   driverkit.Backoff{Min: 50 * time.Millisecond, Max: 50 * time.Millisecond},
	}
	if dial != nil {
		r.Dial = func(ctx context.Context) (*fakeConn, error) { return dial(ctx, int(dials.Add(1))) }
	}
	first := &fakeConn{}
	r.Start(first)
	return r, first, func() ([][2]*fakeConn, []*fakeConn) {
		mu.Lock()
		defer mu.Unlock()
		return append([][2]*fakeConn(nil), installed...), append([]*fakeConn(nil), released...)
	}
}

func TestRedialer(t *testing.T) {
	ctx := context.Background()
	t.Run("the live connection, then one dial for every caller once it is lost", func(t *testing.T) {
		var calls atomic.Int32
		release := make(chan struct{})
		r, first, record := redialer(func(ctx context.Context, n int) (*fakeConn, error) {
			calls.Add(1)
			<-release
			return &fakeConn{id: n}, nil
		})
		if c, gen, err := r.Get(ctx); c != first || gen != 1 || err != nil {
			t.Fatalf("Get = %v, %d, %v; want the first connection, generation 1", c, gen, err)
		}
		first.dead.Store(true)
		if c, gen, live := r.Current(); c != first || gen != 1 || live {
			t.Errorf("Current = %v, %d, %v; want the first connection, not live", c, gen, live)
		}
		var wg sync.WaitGroup
		got := make([]*fakeConn, 8)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, gen, err := r.Get(ctx)
				if err != nil || gen != 2 {
					t.Errorf("Get after the loss = %v, %d, %v", c, gen, err)
				}
				got[i] = c
			}()
		}
		time.Sleep(20 * time.Millisecond) // let the callers wait on the one dial
		close(release)
		wg.Wait()
		for _, c := range got {
			if c == nil || c != got[0] {
				t.Fatalf("callers got %v, want one new connection", got)
			}
		}
		if calls.Load() != 1 {
			t.Errorf("%d dials for 8 callers, want 1", calls.Load())
		}
		if in, _ := record(); len(in) != 2 || in[0] != [2]*fakeConn{nil, first} || in[1] != [2]*fakeConn{first, got[0]} {
			t.Errorf("installed %v, want the first, then the new one in its place", in)
		}
	})
	t.Run("a connection dropped is released and replaced", func(t *testing.T) {
		r, first, record := redialer(func(ctx context.Context, n int) (*fakeConn, error) { return &fakeConn{id: n}, nil })
		r.Drop(&fakeConn{}) // not the one held: nothing happens
		if _, rel := record(); len(rel) != 0 {
			t.Fatalf("released %v after dropping another connection", rel)
		}
		r.Drop(first)
		if c, gen, err := r.Get(ctx); err != nil || c == first || gen != 2 {
			t.Errorf("Get after Drop = %v, %d, %v; want a new connection", c, gen, err)
		}
		if _, rel := record(); len(rel) != 1 || rel[0] != first {
			t.Errorf("released %v, want the dropped connection", rel)
		}
	})
	t.Run("a failed dial is Get's error, and the next dial backs off", func(t *testing.T) {
		refused := errors.New("refused")
		var at []time.Time
		r, first, _ := redialer(func(ctx context.Context, n int) (*fakeConn, error) {
			at = append(at, time.Now())
			if n < 3 {
				return nil, refused
			}
			return &fakeConn{id: n}, nil
		})
		first.dead.Store(true)
		for range 2 {
			if _, _, err := r.Get(ctx); !errors.Is(err, refused) {
				t.Fatalf("Get = %v, want the dial's error", err)
			}
		}
		if c, _, err := r.Get(ctx); err != nil || c.id != 3 {
			t.Fatalf("Get = %v, %v after two failed dials, want the third dial's connection", c, err)
		}
		if len(at) != 3 || at[1].Sub(at[0]) < 50*time.Millisecond || at[2].Sub(at[1]) < 50*time.Millisecond {
			t.Errorf("dials at %v, want 50 ms apart at least", at)
		}
	})
	t.Run("a caller stops waiting when its context ends", func(t *testing.T) {
		r, first, _ := redialer(func(ctx context.Context, n int) (*fakeConn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		first.dead.Store(true)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, _, err := r.Get(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get = %v, want its context's error", err)
		}
	})
	t.Run("Close abandons the dial under way and fails Get", func(t *testing.T) {
		dialled := make(chan *fakeConn, 1)
		r, first, record := redialer(func(ctx context.Context, n int) (*fakeConn, error) {
			<-ctx.Done() // a network that answers nothing, until the dial is abandoned
			c := &fakeConn{id: n}
			dialled <- c
			return c, nil // made anyway, after Close: released
		})
		first.dead.Store(true)
		errc := make(chan error, 1)
		go func() { _, _, err := r.Get(ctx); errc <- err }()
		time.Sleep(20 * time.Millisecond)
		if c := r.Close(); c != first {
			t.Errorf("Close = %v, want the connection held", c)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, transport.ErrClosed) {
				t.Errorf("Get waiting on the dial = %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second): // a hang guard, not a timing assertion
			t.Fatal("Close did not abandon the dial")
		}
		c := <-dialled
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, rel := record(); len(rel) == 1 && rel[0] == c {
				break
			}
		}
		if _, rel := record(); len(rel) != 1 || rel[0] != c {
			t.Errorf("released %v, want the connection dialled after Close", rel)
		}
		if _, _, err := r.Get(ctx); !errors.Is(err, transport.ErrClosed) || !r.Closed() {
			t.Errorf("Get after Close = %v, want ErrClosed", err)
		}
	})
	t.Run("without Dial a lost connection is Unrecoverable, with the cause recorded", func(t *testing.T) {
		gone := errors.New("no redial")
		r, first, _ := redialer(nil)
		r.Unrecoverable = gone
		first.dead.Store(true)
		r.Lost(errors.New("connection reset"))
		if _, _, err := r.Get(ctx); err != gone {
			t.Errorf("Get = %v, want Unrecoverable", err)
		}
		if err := r.Last(); err == nil || err.Error() != "connection reset" {
			t.Errorf("Last = %v, want the cause Lost recorded", err)
		}
	})
}

// A redial after a loss gets FirstTimeout, doubled for each dial that failed before
// it, never more than Timeout; without FirstTimeout, Timeout.
func TestDialTimeout(t *testing.T) {
	for _, tc := range []struct {
		first, limit time.Duration
		failed       int
		want         time.Duration
	}{
		{3 * time.Second, 30 * time.Second, 0, 3 * time.Second},
		{3 * time.Second, 30 * time.Second, 1, 6 * time.Second},
		{3 * time.Second, 30 * time.Second, 3, 24 * time.Second},
		{3 * time.Second, 30 * time.Second, 4, 30 * time.Second},
		{3 * time.Second, 30 * time.Second, 1000, 30 * time.Second},
		{3 * time.Second, time.Second, 0, time.Second},
		{0, 30 * time.Second, 0, 30 * time.Second},
	} {
		if got := driverkit.DialTimeout(tc.first, tc.limit, tc.failed); got != tc.want {
			t.Errorf("DialTimeout(%s, %s, %d) = %s, want %s", tc.first, tc.limit, tc.failed, got, tc.want)
		}
	}
}
