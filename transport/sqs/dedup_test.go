package sqs

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
)

// TestDedupIDIsStable pins the MessageDeduplicationId of each kind of FIFO write: a
// settle write made again after an upgrade must still be deduplicated against the one
// an earlier version made. The hashes are sha256 of the bytes the binding documents,
// computed apart from this code.
func TestDedupIDIsStable(t *testing.T) {
	cases := []struct {
		name string
		m    transport.Message
		seed string
		want string
	}{
		{"publish with meta.id", transport.Message{Queue: "orders.fifo", Attempts: 2, Projection: transport.Projection{MessageID: "m-1"}}, "", "m-1:2"},
		{"raw publish", transport.Message{Queue: "orders.fifo", Body: []byte(`{"a":1}`), Attempts: 3}, "",
			"a2140aaf5cb4caba349d67ca62c91da1a9d4d3e533b126a3fb4785cf8436031e"},
		{"settle write", transport.Message{Queue: "orders.fifo", Attempts: 1, Projection: transport.Projection{MessageID: "m-1"}}, "mid\x000",
			"b46165a9a8a7930880785b7282a935961fe6887d4c910406d5c4f1a5e281f918"},
	}
	for _, c := range cases {
		if got := dedupID(&c.m, c.seed); got != c.want {
			t.Errorf("%s: dedupID = %q, want %q", c.name, got, c.want)
		}
	}
}
