//go:build !race

package controller

// raceEnabled: the tests run under the race detector, ten times slower.
const raceEnabled = false
