//go:build race

package agenttool_test

// raceDetector is true when the tests run under the race detector, whose
// sync.Pool drops items at random: allocation counts are not meaningful.
const raceDetector = true
