package driverkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Failover dials the nodes of a cluster (from [Hosts]) in turn: each Dial starts with
// the node after the one the last successful Dial reached, and moves on to the next
// when a node refuses or does not answer. A connection lost with its node (a primary
// killed, a backup stepping down for a primary back after a failover) is dialled again
// on the other nodes first, and a node that is down costs one refused dial. The first
// Dial starts with the first node. It is safe for concurrent use.
type Failover struct {
	nodes []string

	mu      sync.Mutex
	next    int
	reached int // the node of the last successful Dial; -1 before the first
}

// NewFailover returns a Failover over nodes, which must not be empty.
func NewFailover(nodes []string) *Failover {
	return &Failover{nodes: nodes, reached: -1}
}

// Nodes returns the nodes, in the order given.
func (f *Failover) Nodes() []string { return f.nodes }

// Dial calls dial for each node once, in turn, until one succeeds, and returns that
// node and whether it differs from the node of the last successful Dial (a failover,
// worth a log line; false on the first Dial). When ctx has a deadline each node gets
// an equal share of the time left, so a node that does not answer leaves time for the
// others. When every node fails, the error joins each node's, named.
func (f *Failover) Dial(ctx context.Context, dial func(ctx context.Context, node string) error) (node string, moved bool, err error) {
	f.mu.Lock()
	start := f.next
	f.mu.Unlock()
	var errs []error
	for i := range f.nodes {
		n := (start + i) % len(f.nodes)
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok {
			nctx, cancel = context.WithTimeout(ctx, time.Until(deadline)/time.Duration(len(f.nodes)-i))
		}
		err := dial(nctx, f.nodes[n])
		cancel()
		if err == nil {
			f.mu.Lock()
			moved = f.reached >= 0 && f.reached != n
			f.reached, f.next = n, (n+1)%len(f.nodes)
			f.mu.Unlock()
			return f.nodes[n], moved, nil
		}
		if len(f.nodes) == 1 {
			return "", false, err
		}
		errs = append(errs, fmt.Errorf("node %s: %w", f.nodes[n], err))
		if ctx.Err() != nil {
			break
		}
	}
	return "", false, errors.Join(errs...)
}
