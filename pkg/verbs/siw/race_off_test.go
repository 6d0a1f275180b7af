//go:build !race

package siw

// raceEnabled: the race detector is off; allocation counts are asserted.
const raceEnabled = false
