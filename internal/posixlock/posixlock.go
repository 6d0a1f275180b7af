// Package posixlock holds POSIX record locks (fcntl F_SETLK semantics,
// POSIX.1-2017 fcntl(2) "Record locking"): byte ranges with inclusive
// ends, per owner, where a new lock replaces, splits and merges the
// owner's own locks over its range, and a lock conflicts with another
// owner's overlapping lock when either is exclusive. flock(2) locks are
// the same with one whole-file range per open file.
//
// Set is the locks of one owner on one file; Table is every owner's
// locks on one file, with waiting for a conflicting lock to go.
package posixlock

import (
	"context"
	"slices"
	"sync"
)

// MaxOffset is the largest offset, 2^63-1 (Linux OFFSET_MAX): a range
// ending there extends to the end of the file, however it grows.
const MaxOffset = 1<<63 - 1

// Range is one lock: bytes Start..End inclusive (End = MaxOffset: to the
// end of the file), shared or exclusive.
type Range struct {
	Start, End uint64
	Exclusive  bool
}

func (r Range) overlaps(start, end uint64) bool { return r.Start <= end && start <= r.End }

// Set is the locks of one owner on one file, sorted by Start, disjoint,
// with adjacent ranges of the same type merged. The zero value is empty.
type Set struct {
	r []Range
}

// Ranges returns the locks, sorted by Start.
func (s *Set) Ranges() []Range { return slices.Clone(s.r) }

// Empty reports whether s holds no lock.
func (s *Set) Empty() bool { return len(s.r) == 0 }

// Overlaps reports whether any lock of s overlaps start..end.
func (s *Set) Overlaps(start, end uint64) bool {
	for _, r := range s.r {
		if r.overlaps(start, end) {
			return true
		}
	}
	return false
}

// Covers reports whether locks of s of type exclusive (or exclusive
// ones, when a shared lock is asked) cover all of start..end.
func (s *Set) Covers(start, end uint64, exclusive bool) bool {
	next := start
	for _, r := range s.r {
		if r.End < next || (exclusive && !r.Exclusive) {
			continue
		}
		if r.Start > next {
			return false
		}
		if r.End >= end {
			return true
		}
		next = r.End + 1
	}
	return false
}

// Clear removes start..end from the locks of s (F_UNLCK), splitting a
// lock that extends past either end.
func (s *Set) Clear(start, end uint64) {
	out := s.r[:0:0]
	for _, r := range s.r {
		if !r.overlaps(start, end) {
			out = append(out, r)
			continue
		}
		if r.Start < start {
			out = append(out, Range{r.Start, start - 1, r.Exclusive})
		}
		if r.End > end {
			out = append(out, Range{end + 1, r.End, r.Exclusive})
		}
	}
	s.r = out
}

// Add sets start..end to a lock of the given type, replacing what s held
// there (an upgrade or downgrade of part of a lock splits it), and merges
// it with adjacent or overlapping locks of the same type.
func (s *Set) Add(start, end uint64, exclusive bool) {
	s.Clear(start, end)
	n := Range{start, end, exclusive}
	out := make([]Range, 0, len(s.r)+1)
	for _, r := range s.r {
		if r.Exclusive == exclusive && (r.End+1 == n.Start && r.End != MaxOffset || n.End+1 == r.Start && n.End != MaxOffset) {
			n.Start, n.End = min(n.Start, r.Start), max(n.End, r.End)
			continue
		}
		out = append(out, r)
	}
	i, _ := slices.BinarySearchFunc(out, n.Start, func(r Range, s uint64) int {
		switch {
		case r.Start < s:
			return -1
		case r.Start > s:
			return 1
		}
		return 0
	})
	s.r = slices.Insert(out, i, n)
}

// Table is the locks of every owner on one file, for locks kept by this
// process alone (a mount's local locks). It is safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	owners map[uint64]*Set
	change chan struct{} // closed and replaced at every unlock
}

// Conflict returns a lock of another owner that conflicts with a lock of
// the given type on start..end, and its owner; ok is false when there is
// none.
func (t *Table) Conflict(owner uint64, start, end uint64, exclusive bool) (r Range, holder uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conflictLocked(owner, start, end, exclusive)
}

func (t *Table) conflictLocked(owner uint64, start, end uint64, exclusive bool) (Range, uint64, bool) {
	for o, s := range t.owners {
		if o == owner {
			continue
		}
		for _, r := range s.r {
			if r.overlaps(start, end) && (exclusive || r.Exclusive) {
				return r, o, true
			}
		}
	}
	return Range{}, 0, false
}

// TryLock sets owner's lock on start..end if no other owner's lock
// conflicts, and reports whether it did.
func (t *Table) TryLock(owner uint64, start, end uint64, exclusive bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, _, c := t.conflictLocked(owner, start, end, exclusive); c {
		return false
	}
	if t.owners == nil {
		t.owners = make(map[uint64]*Set)
	}
	s := t.owners[owner]
	if s == nil {
		s = &Set{}
		t.owners[owner] = s
	}
	// a downgrade or unlocked part lets waiters in
	wake := s.Overlaps(start, end)
	s.Add(start, end, exclusive)
	if wake {
		t.wakeLocked()
	}
	return true
}

// Lock is TryLock that waits while a conflicting lock exists, until ctx
// ends (then it returns ctx.Err() and sets nothing).
func (t *Table) Lock(ctx context.Context, owner uint64, start, end uint64, exclusive bool) error {
	for {
		t.mu.Lock()
		if t.change == nil {
			t.change = make(chan struct{})
		}
		ch := t.change
		t.mu.Unlock()
		if t.TryLock(owner, start, end, exclusive) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Unlock removes owner's locks on start..end.
func (t *Table) Unlock(owner uint64, start, end uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.owners[owner]
	if s == nil {
		return
	}
	s.Clear(start, end)
	if s.Empty() {
		delete(t.owners, owner)
	}
	t.wakeLocked()
}

// Empty reports whether no owner holds a lock.
func (t *Table) Empty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.owners) == 0
}

func (t *Table) wakeLocked() {
	if t.change != nil {
		close(t.change)
		t.change = nil
	}
}

// Ranges returns owner's locks, sorted by Start.
func (t *Table) Ranges(owner uint64) []Range {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.owners[owner]; s != nil {
		return s.Ranges()
	}
	return nil
}
