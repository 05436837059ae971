package driverkit

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestDialNodes: each dial tries every node once, from the one after the last
// connection's; the nodes that fail are named in the error.
func TestDialNodes(t *testing.T) {
	down := map[string]bool{}
	var tried []string
	dial := func(_ context.Context, node string) (string, error) {
		tried = append(tried, node)
		if down[node] {
			return "", errors.New("refused")
		}
		return "conn to " + node, nil
	}
	n := NewNodes([]string{"a:1", "b:1", "c:1"})
	for _, step := range []struct {
		down       string // nodes down for this dial
		want       string // the node connected to ("" = none)
		wantTried  string
		wantErrHas string
	}{
		{"", "a:1", "a:1", ""},                                  // a first connection goes to the first node
		{"a:1", "b:1", "b:1", ""},                               // then the next one
		{"b:1", "c:1", "c:1", ""},                               // and the next
		{"a:1", "b:1", "a:1 b:1", ""},                           // round the list, skipping a node that is down
		{"a:1 b:1 c:1", "", "c:1 a:1 b:1", "node c:1: refused"}, // every node once
		{"", "a:1", "a:1", ""},                                  // after a failed round: from the one after its first
	} {
		clear(down)
		for _, d := range strings.Fields(step.down) {
			down[d] = true
		}
		tried = nil
		conn, node, err := DialNodes(context.Background(), n, dial)
		if node != step.want || strings.Join(tried, " ") != step.wantTried {
			t.Fatalf("down %q: connected to %q after trying %v, want %q after %q", step.down, node, tried, step.want, step.wantTried)
		}
		if step.want != "" && (err != nil || conn != "conn to "+step.want) {
			t.Fatalf("down %q: %q, %v", step.down, conn, err)
		}
		if step.wantErrHas != "" && (err == nil || !strings.Contains(err.Error(), step.wantErrHas) || !strings.Contains(err.Error(), "node b:1")) {
			t.Fatalf("down %q: error %v, want every node named", step.down, err)
		}
	}
	one := NewNodes([]string{"x:1"})
	if _, _, err := DialNodes(context.Background(), one, func(context.Context, string) (int, error) { return 0, errors.New("refused") }); err == nil || err.Error() != "refused" {
		t.Errorf("one node: %v, want its error as it is", err)
	}
}
