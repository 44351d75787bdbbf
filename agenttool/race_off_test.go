//go:build !race

package agenttool_test

const raceDetector = false
