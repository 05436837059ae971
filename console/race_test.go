//go:build race

package console_test

// raceEnabled reports a test binary built with the race detector, which makes
// decoding ten times slower: the scale test then checks a tenth of the messages.
const raceEnabled = true
