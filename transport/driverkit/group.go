package driverkit

import (
	"context"
	"errors"
	"sync"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Group is the set of consumers one transport opened, so that the transport's Close
// closes them all with one error policy. [New] adds a consumer to [Config.Group] and
// its Close removes it. The zero value is an open, empty group.
type Group struct {
	mu      sync.Mutex
	closed  bool
	members map[transport.Consumer]struct{}
}

// Add puts c in the group; it fails with [transport.ErrClosed] once the group is
// closed.
func (g *Group) Add(c transport.Consumer) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return transport.ErrClosed
	}
	if g.members == nil {
		g.members = map[transport.Consumer]struct{}{}
	}
	g.members[c] = struct{}{}
	return nil
}

// Remove takes c out of the group.
func (g *Group) Remove(c transport.Consumer) {
	g.mu.Lock()
	delete(g.members, c)
	g.mu.Unlock()
}

// Closed reports whether Close was called.
func (g *Group) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Close closes every consumer of the group at once, each bounded by ctx, and waits for
// them. It returns nil, or their errors joined ([Consumer.Close] says what each
// reports). Add fails from then on; a second Close returns nil.
func (g *Group) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	cs := make([]transport.Consumer, 0, len(g.members))
	for c := range g.members {
		cs = append(cs, c)
	}
	g.mu.Unlock()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Close(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
