//go:build !race

package console_test

// raceEnabled reports a test binary built with the race detector.
const raceEnabled = false
