package driverkit_test

import (
	"math"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// TestAttempts is the one coercion of an attempts header, row by row: a whole number
// read as written (negative ones too), saturating at ±MaxInt; text read as the
// reference SDK's int() reads it; anything else no header. The text rows are the ones
// transport/kafka's reading of bq-attempts was tested with.
func TestAttempts(t *testing.T) {
	const none = math.MinInt // not readable
	for _, tc := range []struct {
		in   any
		want int
	}{
		{int(3), 3}, {int8(-3), -3}, {int16(7), 7}, {int32(2), 2}, {int64(9), 9},
		{uint(5), 5}, {uint8(4), 4}, {uint16(5), 5}, {uint32(6), 6}, {uint64(8), 8},
		{int64(1) << 40, 1 << 40}, {uint64(1) << 63, math.MaxInt}, {uint32(math.MaxUint32), math.MaxUint32},
		{int64(math.MinInt64), -math.MaxInt}, {int(math.MinInt), -math.MaxInt}, {int32(math.MaxInt32), math.MaxInt32},
		{float64(3), 3}, {float32(8), 8}, {float64(-2), -2}, {1e300, math.MaxInt}, {-1e300, -math.MaxInt},
		{1.5, none}, {math.NaN(), none}, {math.Inf(1), none}, {float32(0.25), none},
		{"0", 0}, {"3", 3}, {" 4\t", 4}, {"+2", 2}, {"-1", -1}, {"1_0", 10}, {"1_000", 1000}, {"-0", 0},
		{"99999999999999999999999", math.MaxInt}, {"9223372036854775807", math.MaxInt},
		{"2147483648", 1 << 31}, {"-99999999999999999999999", -math.MaxInt},
		{[]byte("7"), 7}, {[]byte(" 11 "), 11},
		{"", none}, {" ", none}, {"x", none}, {"1.0", none}, {"1e3", none}, {"_1", none}, {"1_", none},
		{"1__0", none}, {"+", none}, {"--1", none}, {"\xff1", none}, {"1\xff", none}, {"0x10", none}, {"١", none},
		{nil, none}, {true, none}, {[]any{1}, none}, {map[string]any{}, none}, {struct{}{}, none},
	} {
		n, ok := driverkit.Attempts(tc.in)
		if tc.want == none {
			if ok {
				t.Errorf("Attempts(%T %#v) = %d, true; want no header", tc.in, tc.in, n)
			}
			continue
		}
		if !ok || n != tc.want {
			t.Errorf("Attempts(%T %#v) = %d, %v; want %d", tc.in, tc.in, n, ok, tc.want)
		}
	}
}

func BenchmarkParseAttempts(b *testing.B) {
	for b.Loop() {
		if n, ok := driverkit.ParseAttempts("3"); !ok || n != 3 {
			b.Fatal(n, ok)
		}
	}
}
