package kafka

import (
	"math/rand/v2"
	"time"
)

// retryBackoff is the backoff of the transport's clients between attempts after a
// failure (a broker that went away, a group that cannot be joined): 250 ms doubling to
// 2 s, with ±20 % jitter. franz-go's own goes to 5 s, so a consumer group's members
// rejoined up to 5 s after a restarted broker was back (found by the fault suite,
// issue 16: 5.4 s); with 2 s they are back within about 2 s.
func retryBackoff(fails int) time.Duration {
	const minBackoff, maxBackoff = 250 * time.Millisecond, 2 * time.Second
	d := maxBackoff
	if fails < 4 {
		d = min(minBackoff<<max(fails-1, 0), maxBackoff)
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
