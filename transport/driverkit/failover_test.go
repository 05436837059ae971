package driverkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// cluster is a fake cluster: the nodes that take connections, and the dials made.
type cluster struct {
	up    map[string]bool
	dials []string
}

func (c *cluster) dial(_ context.Context, node string) error {
	c.dials = append(c.dials, node)
	if c.up[node] {
		return nil
	}
	return errors.New("connection refused")
}

func TestFailoverMovesOnAndBack(t *testing.T) {
	c := &cluster{up: map[string]bool{"a:1": true}}
	f := driverkit.NewFailover([]string{"a:1", "b:2"})
	steps := []struct {
		name      string
		up        []string // the nodes taking connections for this dial
		wantNode  string
		wantMoved bool
		wantDials []string
		wantErr   bool
	}{
		{"first dial: the first node", []string{"a:1"}, "a:1", false, []string{"a:1"}, false},
		{"primary killed, backup active: the other node first", []string{"b:2"}, "b:2", true, []string{"b:2"}, false},
		{"backup steps down for the primary (failback)", []string{"a:1"}, "a:1", true, []string{"a:1"}, false},
		{"a drop with the same node up: the other refuses, then the same", []string{"a:1"}, "a:1", false, []string{"b:2", "a:1"}, false},
		{"every node down", nil, "", false, []string{"b:2", "a:1"}, true},
		{"after a failed round, from where the last success left", []string{"b:2"}, "b:2", true, []string{"b:2"}, false},
	}
	for _, s := range steps {
		c.up, c.dials = map[string]bool{}, nil
		for _, n := range s.up {
			c.up[n] = true
		}
		node, moved, err := f.Dial(context.Background(), c.dial)
		if (err != nil) != s.wantErr || node != s.wantNode || moved != s.wantMoved || strings.Join(c.dials, " ") != strings.Join(s.wantDials, " ") {
			t.Errorf("%s: got node %q moved %v err %v dials %v; want node %q moved %v err %v dials %v",
				s.name, node, moved, err, c.dials, s.wantNode, s.wantMoved, s.wantErr, s.wantDials)
		}
		if s.wantErr && (!strings.Contains(err.Error(), "node a:1") || !strings.Contains(err.Error(), "node b:2")) {
			t.Errorf("%s: the error %q does not name every node", s.name, err)
		}
	}
}

// A node that does not answer takes only its share of the caller's deadline.
func TestFailoverSharesTheDeadline(t *testing.T) {
	f := driverkit.NewFailover([]string{"hang:1", "ok:2"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var shares []time.Duration
	node, _, err := f.Dial(ctx, func(ctx context.Context, node string) error {
		d, _ := ctx.Deadline()
		shares = append(shares, time.Until(d))
		if node == "hang:1" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err != nil || node != "ok:2" {
		t.Fatalf("got %q, %v; want ok:2", node, err)
	}
	if shares[0] > 1100*time.Millisecond {
		t.Errorf("the first of two nodes had %s of a 2s deadline; want about half", shares[0])
	}
	if ctx.Err() != nil {
		t.Error("the caller's deadline passed: the second node had no time")
	}
}

// One node: its own error, unwrapped by node names.
func TestFailoverOneNode(t *testing.T) {
	want := errors.New("refused")
	f := driverkit.NewFailover([]string{"a:1"})
	_, _, err := f.Dial(context.Background(), func(context.Context, string) error { return want })
	if err != want {
		t.Errorf("got %v, want the node's own error", err)
	}
}
