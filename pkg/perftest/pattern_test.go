package perftest

import "testing"

func TestPatternDetectsEveryByte(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 64, 1001} {
		b := make([]byte, n)
		fillPattern(b, 3)
		if off := checkPattern(b, 3); off != -1 {
			t.Fatalf("n=%d: fresh pattern fails at %d", n, off)
		}
		if n >= 8 && checkPattern(b, 4) == -1 {
			t.Fatalf("n=%d: pattern of seed 3 passes for seed 4", n)
		}
		for i := range b {
			b[i] ^= 1
			if off := checkPattern(b, 3); off != i {
				t.Fatalf("n=%d: flipped byte %d reported at %d", n, i, off)
			}
			b[i] ^= 1
		}
	}
}

func TestPatternDetectsShiftAndZeros(t *testing.T) {
	b := make([]byte, 4096)
	fillPattern(b, 0)
	shifted := append([]byte{0}, b[:len(b)-1]...)
	if checkPattern(shifted, 0) == -1 {
		t.Fatal("a buffer shifted by one byte passes")
	}
	if checkPattern(make([]byte, 64), 0) != 0 {
		t.Fatal("zeros pass")
	}
}
