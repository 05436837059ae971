package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A connection found dead is logged once per broker, whichever request finds it and
// whether its write or its read timed out (issue 38: a heartbeat or a commit that could
// not be written was not logged, and the loss went unsaid); a request that ends for
// another reason is not a dead connection.
func TestDeadConnLogged(t *testing.T) {
	timeout := fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:9092: %w", os.ErrDeadlineExceeded)
	type event struct {
		write bool
		node  int32
		key   kmsg.Key
		err   error
	}
	for _, tc := range []struct {
		name   string
		events []event
		want   []string // the lines, by their request and step
	}{
		{"a heartbeat whose write timed out", []event{{true, 1, kmsg.Heartbeat, timeout}}, []string{"request=Heartbeat step=write"}},
		{"a fetch whose response did not come", []event{{false, 1, kmsg.Fetch, timeout}}, []string{"request=Fetch step=read"}},
		{"the other requests on the dead broker fail together",
			[]event{{true, 1, kmsg.OffsetCommit, timeout}, {false, 1, kmsg.Fetch, timeout}, {true, 1, kmsg.Metadata, timeout}},
			[]string{"request=OffsetCommit step=write"}},
		{"two brokers, two lines", []event{{false, 1, kmsg.Fetch, timeout}, {true, 2, kmsg.Produce, timeout}},
			[]string{"request=Fetch step=read", "request=Produce step=write"}},
		{"no error", []event{{true, 1, kmsg.Heartbeat, nil}, {false, 1, kmsg.Heartbeat, nil}}, nil},
		{"the request's context ended", []event{{true, 1, kmsg.Fetch, context.Canceled}, {false, 1, kmsg.Fetch, context.DeadlineExceeded}}, nil},
		{"the client closed", []event{{false, 1, kmsg.Fetch, kgo.ErrClientClosed}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := &deadConnLog{log: slog.New(slog.NewTextHandler(&buf, nil))}
			for _, e := range tc.events {
				meta := kgo.BrokerMetadata{NodeID: e.node, Host: "127.0.0.1", Port: 9092}
				if e.write {
					h.OnBrokerWrite(meta, int16(e.key), 0, 0, 2500*time.Millisecond, e.err)
				} else {
					h.OnBrokerRead(meta, int16(e.key), 0, 0, 3*time.Second, e.err)
				}
			}
			var got []string
			for line := range strings.Lines(buf.String()) {
				if !strings.Contains(line, "kafka: no answer from a broker within the request timeout") || !strings.Contains(line, "level=WARN") {
					t.Errorf("unexpected line %q", line)
				}
				for _, w := range tc.want {
					if strings.Contains(line, w) {
						got = append(got, w)
					}
				}
			}
			if len(got) != len(tc.want) || strings.Count(buf.String(), "\n") != len(tc.want) {
				t.Errorf("logged %q, want one line each for %q", buf.String(), tc.want)
			}
		})
	}
}
