package posixlock

import (
	"cmp"
	"math"
	"slices"
)

// Lock is one lock of an owner of type O.
type Lock[O comparable] struct {
	Owner O
	Range
}

// Owners is the locks of every owner on one file, whatever tells owners
// apart (O: a number, or a host and owner handle). An owner's locks never
// overlap each other and never conflict with each other; its adjacent
// locks of one type are merged, as fcntl(2) F_SETLK keeps them. Ends are
// at most MaxOffset. The zero value is empty; it is not safe for
// concurrent use.
type Owners[O comparable] struct {
	locks []Lock[O] // in the order they were set
}

// Conflict returns the first lock (in the order locks were set) of
// another owner than owner that overlaps start..end and is exclusive, or
// that an exclusive request meets; ok is false when there is none.
func (s *Owners[O]) Conflict(owner O, start, end uint64, exclusive bool) (l Lock[O], ok bool) {
	for _, l := range s.locks {
		if l.Owner != owner && l.overlaps(start, end) && (exclusive || l.Exclusive) {
			return l, true
		}
	}
	return Lock[O]{}, false
}

// Set gives owner a lock of the given type on start..end, replacing what
// it held there (an upgrade or downgrade of part of a lock splits it) and
// merging it with the owner's overlapping or adjacent locks of the same
// type. Other owners' locks are left alone: the caller has checked
// Conflict.
func (s *Owners[O]) Set(owner O, start, end uint64, exclusive bool) {
	n := Range{start, end, exclusive}
	out := s.locks[:0:0]
	for _, l := range s.locks {
		switch {
		case l.Owner != owner:
			out = append(out, l)
		case l.Exclusive == exclusive && l.touches(n.Start, n.End):
			n.Start, n.End = min(n.Start, l.Start), max(n.End, l.End)
		default:
			out = appendOutside(out, l, n.Start, n.End)
		}
	}
	s.locks = append(out, Lock[O]{owner, n})
}

// Unlock removes start..end from owner's locks (F_UNLCK), splitting a
// lock that extends past either end, and reports whether anything was
// removed.
func (s *Owners[O]) Unlock(owner O, start, end uint64) bool {
	out := s.locks[:0:0]
	changed := false
	for _, l := range s.locks {
		if l.Owner != owner || !l.overlaps(start, end) {
			out = append(out, l)
			continue
		}
		changed = true
		out = appendOutside(out, l, start, end)
	}
	s.locks = out
	return changed
}

// RemoveIf removes every lock whose owner drop is true for and returns
// how many it removed.
func (s *Owners[O]) RemoveIf(drop func(O) bool) int {
	n := len(s.locks)
	s.locks = slices.DeleteFunc(s.locks, func(l Lock[O]) bool { return drop(l.Owner) })
	return n - len(s.locks)
}

// Len returns the number of locks held.
func (s *Owners[O]) Len() int { return len(s.locks) }

// Locks returns a copy of the locks, in the order they were set.
func (s *Owners[O]) Locks() []Lock[O] { return slices.Clone(s.locks) }

// Ranges returns owner's locks, sorted by Start.
func (s *Owners[O]) Ranges(owner O) []Range {
	var out []Range
	for _, l := range s.locks {
		if l.Owner == owner {
			out = append(out, l.Range)
		}
	}
	slices.SortFunc(out, func(a, b Range) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// Overlaps reports whether any lock of owner overlaps start..end.
func (s *Owners[O]) Overlaps(owner O, start, end uint64) bool {
	for _, l := range s.locks {
		if l.Owner == owner && l.overlaps(start, end) {
			return true
		}
	}
	return false
}

func (r Range) overlaps(start, end uint64) bool { return r.Start <= end && start <= r.End }

// touches reports whether r overlaps start..end or is adjacent to it.
func (r Range) touches(start, end uint64) bool {
	return r.overlaps(start, end) ||
		r.End != math.MaxUint64 && r.End+1 == start ||
		end != math.MaxUint64 && end+1 == r.Start
}

// appendOutside appends the parts of l outside start..end: l itself when
// they do not overlap, else none, one or two pieces.
func appendOutside[O comparable](out []Lock[O], l Lock[O], start, end uint64) []Lock[O] {
	if !l.overlaps(start, end) {
		return append(out, l)
	}
	if l.Start < start {
		left := l
		left.End = start - 1
		out = append(out, left)
	}
	if l.End > end {
		right := l
		right.Start = end + 1
		out = append(out, right)
	}
	return out
}
