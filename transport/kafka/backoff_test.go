package kafka

import (
	"testing"
	"time"
)

// The clients' retry backoff doubles from 250 ms and stays at 2 s, ±20 %.
func TestRetryBackoffIsBounded(t *testing.T) {
	want := 250 * time.Millisecond
	for fails := 1; fails <= 30; fails++ {
		d := retryBackoff(fails)
		if d < want*8/10 || d > want*12/10 {
			t.Fatalf("after %d failures the backoff is %s, want %s ±20%%", fails, d, want)
		}
		want = min(2*want, 2*time.Second)
	}
}
