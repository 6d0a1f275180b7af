//go:build !race

package rpcrdma

// raceEnabled: the race detector is off; allocation counts are asserted.
const raceEnabled = false
