//go:build race

package siw

// raceEnabled: the race detector is on. Allocation counts are not asserted
// then: the race runtime allocates, and sync.Pool drops items at random.
const raceEnabled = true
