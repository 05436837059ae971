package redis_test

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
)

// TestScoresAreSecondsToTheMillisecond: the scores the transport writes (reservation
// deadlines, a delayed message's due time, "now" of the sweep) read as the Python SDK and
// earlier versions wrote them: Unix seconds with the milliseconds as the shortest
// decimal, the text strconv.FormatFloat gives for ms/1000.
func TestScoresAreSecondsToTheMillisecond(t *testing.T) {
	ms := []int64{0, 1, 10, 100, 999, 1000, 1500, 1733371234000, 1733371234500, 1733371234050, 1733371234007, 1733371234567, -1500}
	for range 1000 {
		ms = append(ms, rand.Int64N(4_000_000_000_000))
	}
	for _, m := range ms {
		want := strconv.FormatFloat(float64(m)/1000, 'f', -1, 64)
		if got := bqredis.ScoreAtForTest(time.UnixMilli(m)); got != want {
			t.Errorf("score of %d ms = %q, want %q", m, got, want)
		}
	}
}

// TestTokensAreFreshHex: a reservation token is 32 lowercase hex characters (the
// deadline member "<token>:<element>" the Python SDK's reaper reads) and never repeats.
func TestTokensAreFreshHex(t *testing.T) {
	tr, err := bqredis.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 1000 {
		tok := bqredis.TokenForTest(tr)
		if !hex32.MatchString(tok) || seen[tok] {
			t.Fatalf("token %q: want 32 lowercase hex characters, fresh", tok)
		}
		seen[tok] = true
	}
}
