package driverkit_test

import (
	"math"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// TestAttempts is the one coercion of an attempts header, row by row: numbers clamped
// to [0, MaxInt32], text read as the reference SDK's int() reads it, anything else no
// header.
func TestAttempts(t *testing.T) {
	const none = -1
	for _, tc := range []struct {
		in   any
		want int // none: not readable
	}{
		{int(3), 3}, {int8(-3), 0}, {int16(7), 7}, {int32(2), 2}, {int64(9), 9},
		{uint(5), 5}, {uint8(4), 4}, {uint16(5), 5}, {uint32(6), 6}, {uint64(8), 8},
		{int64(1) << 40, math.MaxInt32}, {uint64(1) << 63, math.MaxInt32}, {uint32(math.MaxUint32), math.MaxInt32},
		{int64(math.MinInt64), 0}, {int32(math.MaxInt32), math.MaxInt32},
		{float64(3), 3}, {float32(8), 8}, {float64(-2), 0}, {1e300, math.MaxInt32}, {-1e300, 0},
		{1.5, none}, {math.NaN(), none}, {math.Inf(1), none}, {float32(0.25), none},
		{"12", 12}, {" 4 ", 4}, {"\t+2\n", 2}, {"1_000", 1000}, {"0", 0}, {"-1", 0}, {"-0", 0},
		{"2147483648", math.MaxInt32}, {"99999999999999999999999", math.MaxInt32},
		{[]byte("7"), 7}, {[]byte(" 11 "), 11},
		{"", none}, {" ", none}, {"x", none}, {"1.5", none}, {"1e3", none}, {"_1", none}, {"1_", none},
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
