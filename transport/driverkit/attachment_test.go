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

type link struct{ n int32 }

func TestAttachment(t *testing.T) {
	ctx := context.Background()
	t.Run("opened once for every caller, again once lost", func(t *testing.T) {
		var opens atomic.Int32
		release := make(chan struct{})
		a := driverkit.NewAttachment(func(context.Context) (*link, error) {
			<-release
			return &link{opens.Add(1)}, nil
		})
		var wg sync.WaitGroup
		got := make([]*link, 8)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], _ = a.Get(ctx)
			}()
		}
		close(release)
		wg.Wait()
		for _, l := range got {
			if l == nil || l != got[0] {
				t.Fatalf("callers got %v, want one link", got)
			}
		}
		if a.Lost(&link{}) || a.Current() != got[0] {
			t.Fatal("Lost of a link that is not the live one forgot the live one")
		}
		if !a.Lost(got[0]) || a.Current() != nil || a.Lost(got[0]) {
			t.Fatal("Lost of the live link did not forget it once")
		}
		if l, err := a.Get(ctx); err != nil || l.n != 2 {
			t.Fatalf("Get after the loss = %v, %v; want a second link", l, err)
		}
	})
	t.Run("an opening that fails is Get's error and is tried again", func(t *testing.T) {
		refused := errors.New("refused")
		n := 0
		a := driverkit.NewAttachment(func(context.Context) (*link, error) {
			if n++; n == 1 {
				return nil, refused
			}
			return &link{int32(n)}, nil
		})
		if _, err := a.Get(ctx); !errors.Is(err, refused) {
			t.Fatalf("Get = %v, want the opening's error", err)
		}
		if l, err := a.Get(ctx); err != nil || l.n != 2 {
			t.Fatalf("Get = %v, %v; want the second opening's link", l, err)
		}
	})
	t.Run("a caller waiting for another's opening leaves on its context or Done", func(t *testing.T) {
		release := make(chan struct{})
		a := driverkit.NewAttachment(func(context.Context) (*link, error) { <-release; return &link{1}, nil })
		done := make(chan struct{})
		a.Done = done
		go func() { _, _ = a.Get(ctx) }()
		time.Sleep(10 * time.Millisecond) // the first caller holds the opening
		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if _, err := a.Get(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get whose context ended = %v, want its error", err)
		}
		close(done)
		if _, err := a.Get(ctx); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Get once Done closed = %v, want ErrClosed", err)
		}
		close(release)
	})
	t.Run("Close hands the live link over and fails Get", func(t *testing.T) {
		a := driverkit.NewAttachment(func(context.Context) (*link, error) { return &link{1}, nil })
		l, _ := a.Get(ctx)
		if got, err := a.Close(ctx); got != l || err != nil {
			t.Fatalf("Close = %v, %v; want the live link", got, err)
		}
		if _, err := a.Get(ctx); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Get after Close = %v, want ErrClosed", err)
		}
	})
}
