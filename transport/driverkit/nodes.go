package driverkit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Nodes is the node list of a cluster URL ([Hosts]) as a driver that reconnects uses
// it: each dial tries every node once, starting after the node of the last connection,
// so the clients of a node that went away move on to the next one (round-robin), and
// a first connection goes to the first node. Its methods are safe for concurrent use.
type Nodes struct {
	hosts []string
	next  atomic.Uint64 // the node the next dial tries first
}

// NewNodes returns the node list hosts (at least one).
func NewNodes(hosts []string) *Nodes { return &Nodes{hosts: hosts} }

// Len is the number of nodes.
func (n *Nodes) Len() int { return len(n.hosts) }

// DialNodes calls dial for each node of n in turn until one succeeds, and returns its
// connection and the node. When every node fails, the error joins theirs, each naming
// its node when there are several.
func DialNodes[C any](ctx context.Context, n *Nodes, dial func(ctx context.Context, node string) (C, error)) (C, string, error) {
	first := int(n.next.Load() % uint64(len(n.hosts)))
	var errs []error
	for i := range n.hosts {
		k := (first + i) % len(n.hosts)
		c, err := dial(ctx, n.hosts[k])
		if err == nil {
			n.next.Store(uint64(k + 1))
			return c, n.hosts[k], nil
		}
		if len(n.hosts) > 1 {
			err = fmt.Errorf("node %s: %w", n.hosts[k], err)
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	n.next.Store(uint64(first + 1))
	var zero C
	if len(errs) == 1 {
		return zero, "", errs[0]
	}
	return zero, "", errors.Join(errs...)
}
