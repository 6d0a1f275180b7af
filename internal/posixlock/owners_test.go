package posixlock

import (
	"math"
	"slices"
	"testing"
)

func TestSpanLength(t *testing.T) {
	for _, c := range []struct {
		offset, length uint64
		start, end     uint64
		ok             bool
	}{
		{0, 0, 0, MaxOffset, true},
		{0, 1, 0, 0, true},
		{100, 50, 100, 149, true},
		{MaxOffset, 0, MaxOffset, MaxOffset, true},
		{MaxOffset, 1, MaxOffset, MaxOffset, true},
		{MaxOffset, 2, 0, 0, false},
		{MaxOffset + 1, 0, 0, 0, false},
		{math.MaxUint64, 1, 0, 0, false},
		{1, MaxOffset, 1, MaxOffset, true},
		{2, MaxOffset, 0, 0, false},
		{0, math.MaxUint64, 0, 0, false}, // offset+length wraps 2^64
		{10, 1 << 63, 0, 0, false},
	} {
		start, end, ok := Span(c.offset, c.length)
		if start != c.start || end != c.end || ok != c.ok {
			t.Errorf("Span(%d, %d) = %d, %d, %v; want %d, %d, %v", c.offset, c.length, start, end, ok, c.start, c.end, c.ok)
		}
		if ok && end < MaxOffset && Length(start, end) != c.length {
			t.Errorf("Length(%d, %d) = %d, want %d", start, end, Length(start, end), c.length)
		}
	}
	if Length(5, MaxOffset) != 0 || Length(5, 9) != 5 || Length(0, math.MaxUint64) != 0 {
		t.Error("Length")
	}
}

// TestOwners: locks of several owners on one file, as a server keeps them.
func TestOwners(t *testing.T) {
	type own struct{ host, oh string }
	a, a2, b := own{"a", "1"}, own{"a", "2"}, own{"b", "1"}
	var s Owners[own]
	s.Set(a, 0, 99, false)
	s.Set(b, 50, 149, false)
	if _, ok := s.Conflict(a2, 0, MaxOffset, false); ok {
		t.Fatal("shared locks conflict with a shared request")
	}
	// the first conflicting lock in the order set: a's, though b's also conflicts
	if l, ok := s.Conflict(a2, 60, 60, true); !ok || l.Owner != a || l.Range != (Range{0, 99, false}) {
		t.Fatalf("conflict %+v %v", l, ok)
	}
	if _, ok := s.Conflict(a, 0, 49, true); ok {
		t.Fatal("a's own lock conflicts with a's upgrade")
	} else if l, ok := s.Conflict(a, 0, 50, true); !ok || l.Owner != b {
		t.Fatalf("upgrade over b's lock: %+v %v", l, ok)
	}
	s.Set(a, 40, 59, true) // upgrade the middle: split
	if got, want := s.Ranges(a), []Range{{0, 39, false}, {40, 59, true}, {60, 99, false}}; !slices.Equal(got, want) {
		t.Fatalf("a after upgrade: %v, want %v", got, want)
	}
	if got := s.Ranges(b); !slices.Equal(got, []Range{{50, 149, false}}) {
		t.Fatalf("b changed by a's lock: %v", got)
	}
	s.Set(a, 40, 59, false) // downgrade joins
	if got := s.Ranges(a); !slices.Equal(got, []Range{{0, 99, false}}) {
		t.Fatalf("a after downgrade: %v", got)
	}
	if s.Unlock(a2, 0, MaxOffset) {
		t.Fatal("unlock by an owner with no locks removed something")
	}
	if !s.Unlock(a, 10, 19) || !slices.Equal(s.Ranges(a), []Range{{0, 9, false}, {20, 99, false}}) {
		t.Fatalf("unlock middle: %v", s.Ranges(a))
	}
	if !s.Overlaps(a, 5, 5) || s.Overlaps(a, 10, 19) || s.Overlaps(a2, 0, MaxOffset) {
		t.Fatal("Overlaps")
	}
	s.Set(a2, 200, MaxOffset, true)
	if n := s.RemoveIf(func(o own) bool { return o.host == "a" }); n != 3 || s.Len() != 1 {
		t.Fatalf("RemoveIf removed %d, %d left", n, s.Len())
	}
	if l := s.Locks(); len(l) != 1 || l[0].Owner != b {
		t.Fatalf("left %+v", l)
	}
}

// TestOwnersMerge: merging at the ends of the offset space does not wrap.
func TestOwnersMerge(t *testing.T) {
	var s Owners[int]
	s.Set(1, 0, math.MaxUint64, true)
	s.Set(1, 0, 0, true)
	if got := s.Ranges(1); !slices.Equal(got, []Range{{0, math.MaxUint64, true}}) {
		t.Fatalf("%v", got)
	}
	var u Owners[int]
	u.Set(1, 10, math.MaxUint64, true)
	u.Set(1, 0, 0, true) // not adjacent: MaxUint64+1 wraps to 0
	if got := u.Ranges(1); !slices.Equal(got, []Range{{0, 0, true}, {10, math.MaxUint64, true}}) {
		t.Fatalf("%v", got)
	}
	u.Set(1, 1, 9, true)
	if got := u.Ranges(1); !slices.Equal(got, []Range{{0, math.MaxUint64, true}}) {
		t.Fatalf("%v", got)
	}
}
