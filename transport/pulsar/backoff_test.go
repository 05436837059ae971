package pulsar

import "testing"

// The reconnection backoff doubles from 100 ms and stays at 2 s (plus at most 20 %
// jitter), and starts again after a reset.
func TestReconnectBackoffIsBounded(t *testing.T) {
	b := newReconnectBackoff()
	want := minReconnect
	for i := range 12 {
		d := b.Next()
		if d < want || d > want+want/5 {
			t.Fatalf("attempt %d waits %s, want %s plus at most 20%%", i, d, want)
		}
		want = min(2*want, maxReconnect)
	}
	if !b.IsMaxBackoffReached() {
		t.Error("the backoff does not report its maximum after 12 attempts")
	}
	b.Reset()
	if d := b.Next(); d > minReconnect+minReconnect/5 {
		t.Errorf("after a reset the first wait is %s, want %s", d, minReconnect)
	}
}
