// Package posixlock holds POSIX record locks (fcntl F_SETLK semantics,
// POSIX.1-2017 fcntl(2) "Record locking"): byte ranges with inclusive
// ends, per owner, where a new lock replaces, splits and merges the
// owner's own locks over its range, and a lock conflicts with another
// owner's overlapping lock when either is exclusive. flock(2) locks are
// the same with one whole-file range per open file. NLM (X/Open XNFS
// chapter 10) carries the same locks between hosts.
//
// Owners is every owner's locks on one file; Set is the locks of one
// owner on one file; Table is Owners for owners numbered by this process,
// with waiting for a conflicting lock to go. Span and Length convert
// between a range and its offset and length.
package posixlock

import (
	"context"
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

// Span returns the inclusive range of length bytes at offset, as fcntl's
// (l_start, l_len) and NLM v4's (l_offset, l_len) give it: length 0
// reaches MaxOffset, the end of the file. ok is false when the range
// starts or ends past MaxOffset (fcntl's EOVERFLOW, NLM4_FBIG), offset +
// length wrapping past 2^64 included.
func Span(offset, length uint64) (start, end uint64, ok bool) {
	if offset > MaxOffset || (length != 0 && length-1 > MaxOffset-offset) {
		return 0, 0, false
	}
	if length == 0 {
		return offset, MaxOffset, true
	}
	return offset, offset + length - 1, true
}

// Length returns the l_len of the inclusive range start..end: 0 when it
// reaches MaxOffset (to the end of the file), else end-start+1.
func Length(start, end uint64) uint64 {
	if end >= MaxOffset {
		return 0
	}
	return end - start + 1
}

// Set is the locks of one owner on one file: disjoint, with adjacent
// ranges of the same type merged. The zero value is empty.
type Set struct {
	o Owners[struct{}]
}

// Ranges returns the locks, sorted by Start.
func (s *Set) Ranges() []Range { return s.o.Ranges(struct{}{}) }

// Empty reports whether s holds no lock.
func (s *Set) Empty() bool { return s.o.Len() == 0 }

// Overlaps reports whether any lock of s overlaps start..end.
func (s *Set) Overlaps(start, end uint64) bool { return s.o.Overlaps(struct{}{}, start, end) }

// Covers reports whether locks of s of type exclusive (or exclusive
// ones, when a shared lock is asked) cover all of start..end.
func (s *Set) Covers(start, end uint64, exclusive bool) bool {
	next := start
	for _, r := range s.Ranges() {
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
func (s *Set) Clear(start, end uint64) { s.o.Unlock(struct{}{}, start, end) }

// Add sets start..end to a lock of the given type, replacing what s held
// there (an upgrade or downgrade of part of a lock splits it), and merges
// it with adjacent or overlapping locks of the same type.
func (s *Set) Add(start, end uint64, exclusive bool) { s.o.Set(struct{}{}, start, end, exclusive) }

// Table is the locks of every owner on one file, for locks kept by this
// process alone (a mount's local locks). It is safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	o      Owners[uint64]
	change chan struct{} // closed and replaced at every unlock
}

// Conflict returns a lock of another owner that conflicts with a lock of
// the given type on start..end, and its owner; ok is false when there is
// none.
func (t *Table) Conflict(owner uint64, start, end uint64, exclusive bool) (r Range, holder uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.o.Conflict(owner, start, end, exclusive)
	return l.Range, l.Owner, ok
}

// TryLock sets owner's lock on start..end if no other owner's lock
// conflicts, and reports whether it did.
func (t *Table) TryLock(owner uint64, start, end uint64, exclusive bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, c := t.o.Conflict(owner, start, end, exclusive); c {
		return false
	}
	// a downgrade or unlocked part lets waiters in
	wake := t.o.Overlaps(owner, start, end)
	t.o.Set(owner, start, end, exclusive)
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
	if t.o.Unlock(owner, start, end) {
		t.wakeLocked()
	}
}

// Empty reports whether no owner holds a lock.
func (t *Table) Empty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.o.Len() == 0
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
	return t.o.Ranges(owner)
}
