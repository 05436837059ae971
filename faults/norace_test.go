//go:build !race

package faults_test

// raceDetector says the test binary, and so every worker process, runs with the race
// detector.
const raceDetector = false
