//go:build race

package adversary

// raceDetector is true when the tests run under the race detector: the
// programs they build are built with it too.
const raceDetector = true
