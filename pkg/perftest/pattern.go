package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrVerify reports a sink whose bytes are not the pattern the source was
// filled with.
var ErrVerify = errors.New("perftest: data verification failed")

// patternWord is word i (8 bytes) of the pattern of seed: splitmix64, so
// that a shifted, stale or zeroed buffer does not match.
func patternWord(seed, i uint64) uint64 {
	z := seed*0x9e3779b97f4a7c15 + (i+1)*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillPattern writes the pattern of seed into b.
func fillPattern(b []byte, seed uint64) {
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(w[:], patternWord(seed, uint64(i/8)))
		copy(b[i:], w[:])
	}
}

// checkPattern returns the offset of the first byte of b that is not the
// pattern of seed, or -1 when all are.
func checkPattern(b []byte, seed uint64) int {
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(w[:], patternWord(seed, uint64(i/8)))
		n := min(8, len(b)-i)
		for k := 0; k < n; k++ {
			if b[i+k] != w[k] {
				return i + k
			}
		}
	}
	return -1
}

// verifyError wraps ErrVerify with where the damage is.
func verifyError(where string, off int, size int) error {
	return fmt.Errorf("%w: %s: byte %d of %d differs from the pattern", ErrVerify, where, off, size)
}
