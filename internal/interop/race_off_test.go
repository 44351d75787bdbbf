//go:build !race

package interop

// raceDetector is true when the tests run under the race detector: the
// guard they build is built with it too.
const raceDetector = false
