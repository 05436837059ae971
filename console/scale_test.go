package console_test

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
)

// TestDLQView100k seeds 100,000 dead letters on the real Redis and Kafka and
// measures how the dead-letter page answers: the first read of the queue (the
// index), the page once the index is built, a filtered page far into the list, and a
// read of the queue again (every message browsed, none decoded again). It checks the
// counts the page shows; the times are logged for README.md, not asserted.
//
// Built with the race detector (make test's go test -race), which slows decoding
// tenfold, it checks 10,000; scripts/test.sh runs it once more without the race
// detector, at 100,000, for the figures.
func TestDLQView100k(t *testing.T) {
	n := 100_000
	if raceEnabled {
		n = 10_000
	}
	for _, name := range []string{"redis", "kafka"} {
		t.Run(name, func(t *testing.T) {
			lb := openLive(t, name)
			start := time.Now()
			lb.seedDLQ(t, n, time.Now().Add(-time.Hour))
			t.Logf("%s: seeded %d dead letters in %v", name, n, time.Since(start).Round(time.Millisecond))
			srv := serve(t, []console.Broker{lb.broker()}, console.WithoutPrewarm(), console.WithStaleAfter(time.Hour))
			cl := newClient(t, srv.URL)
			base := q("b", "0", "q", lb.dlq)

			var v dlqView
			start, cpu0 := time.Now(), cpuTime(t)
			cl.getJSON("/api/dlq?wait=1&"+base, &v)
			cold, coldCPU := time.Since(start), cpuTime(t)-cpu0
			if !v.Ready || v.Total != n {
				t.Fatalf("first read: ready %v, %d messages, want %d", v.Ready, v.Total, n)
			}
			reasons := v.counts("reason")
			for _, r := range []string{"failed", "unknown_urn", "poison"} {
				if want := lb.seed.Count(func(it dlqtest.Item) bool { return it.Reason == r }); reasons[r] != want {
					t.Errorf("reason %s: %d, want %d", r, reasons[r], want)
				}
			}

			page := timed(t, cl, "/dlq?"+base)
			filtered := timed(t, cl, "/dlq?"+base+"&reason=failed&page=200")
			api := timed(t, cl, "/api/dlq?"+base+"&urn="+dlqtest.URNPayments)

			start, cpu0 = time.Now(), cpuTime(t)
			cl.getJSON("/api/dlq?refresh=1&"+base, &v)
			again, againCPU := time.Since(start), cpuTime(t)-cpu0
			if v.Total != n {
				t.Errorf("second read: %d messages", v.Total)
			}
			if raceEnabled {
				t.Logf("%s: built with the race detector: times not representative", name)
			}
			t.Logf("%s, %d dead letters: first read (the index) %v (CPU %v); the page then %v, a filtered page (page 200 of failed) %v, "+
				"the JSON of another filter %v (median of 5); read again %v (CPU %v); load average %s",
				name, n, cold.Round(time.Millisecond), coldCPU.Round(time.Millisecond), page, filtered, api,
				again.Round(time.Millisecond), againCPU.Round(time.Millisecond), loadAverage())
		})
	}
}

// timed returns the median time of five GETs of path (each must answer 200).
func timed(t *testing.T, cl *client, path string) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range 5 {
		start := time.Now()
		resp, body := cl.get(path)
		ds = append(ds, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2].Round(100 * time.Microsecond)
}

// cpuTime is the CPU time the test process used so far (user and system).
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the machine's one-minute load average, for the log.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%s on %d CPUs", f[0], runtime.NumCPU())
}
