package nsmstate

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestNext(t *testing.T) {
	for _, c := range []struct{ n, want int32 }{
		{0, 1}, {1, 3}, {2, 3}, {3, 5}, {4, 5},
		{math.MaxInt32 - 2, math.MaxInt32}, // odd: +2
		{math.MaxInt32 - 1, math.MaxInt32}, // even: +1
		{math.MaxInt32, 1},                 // would pass 2^31-1
		{-4, 1},
	} {
		if got := Next(c.n); got != c.want {
			t.Errorf("Next(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestUp: a new directory starts at 1; each start after one that left
// the state odd (a crash) adds 2; a state left even (recorded down) gets
// the next odd number; the file holds the number in decimal and no
// temporary file is left.
func TestUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for _, want := range []int32{1, 3, 5} {
		n, err := Up(path)
		if err != nil || n != want {
			t.Fatalf("Up = %d, %v; want %d", n, err, want)
		}
		if b, _ := os.ReadFile(path); string(b) != string(rune('0'+want))+"\n" {
			t.Fatalf("state file %q", b)
		}
	}
	if err := Write(path, 10); err != nil {
		t.Fatal(err)
	}
	if n, err := Up(path); err != nil || n != 11 {
		t.Fatalf("Up after 10 = %d, %v", n, err)
	}
	if n, err := Read(path); err != nil || n != 11 {
		t.Fatalf("Read = %d, %v", n, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
}

func TestReadBad(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"x\n", "-3\n", "4294967297\n", "", "1 2"} {
		path := filepath.Join(dir, "state")
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if n, err := Read(path); !errors.Is(err, ErrBad) {
			t.Errorf("%q: %d, %v", s, n, err)
		}
		if _, err := Up(path); !errors.Is(err, ErrBad) {
			t.Errorf("Up of %q: %v", s, err)
		}
	}
	if n, err := Read(filepath.Join(dir, "none")); n != 0 || err != nil {
		t.Fatalf("missing file: %d, %v", n, err)
	}
	if _, err := Read(dir); err == nil || errors.Is(err, ErrBad) {
		t.Fatalf("a directory: %v", err)
	}
	if err := Write(filepath.Join(dir, "no", "such"), 3); err == nil {
		t.Fatal("Write into a missing directory")
	}
}

func TestVolatile(t *testing.T) {
	a := Volatile()
	if a&1 != 1 || a <= 0 {
		t.Fatalf("Volatile = %d, want odd and positive", a)
	}
	if b := Volatile(); b < a {
		t.Fatalf("Volatile went back: %d then %d", a, b)
	}
}
