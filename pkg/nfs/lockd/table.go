package lockd

import (
	"math"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
)

// MaxOffset is the largest byte offset a lock may cover, 2^63-1, as Linux
// lockd's OFFSET_MAX: NLM v4 ranges map onto signed 64-bit file offsets.
const MaxOffset = math.MaxInt64

// Owner is a lock owner: the client host's caller_name and the owner
// handle (oh) and svid it sent, as Linux lockd tells lock owners apart by
// host and svid. Locks of one owner never conflict with each other.
type Owner struct {
	Caller string // nlm4_lock.caller_name
	OH     string // nlm4_lock.oh
	Svid   int32  // nlm4_lock.svid
}

// Range is a byte range [Start, End], both inclusive, End at most
// MaxOffset (MaxOffset means "to the end of the file and beyond").
type Range struct {
	Start, End uint64
}

// RangeOf converts an NLM v4 (l_offset, l_len) pair into a Range: l_len 0
// reaches MaxOffset. A range starting past MaxOffset or ending past it is
// nlm.FBig, as Linux lockd's nlm4svc_retrieve_args answers NLM4_FBIG.
func RangeOf(offset, length uint64) (Range, nlm.Stat) {
	if offset > MaxOffset || (length != 0 && length-1 > MaxOffset-offset) {
		return Range{}, nlm.FBig
	}
	if length == 0 {
		return Range{offset, MaxOffset}, nlm.Granted
	}
	return Range{offset, offset + length - 1}, nlm.Granted
}

// Length returns the range as an NLM l_len: 0 when it reaches MaxOffset.
func (r Range) Length() uint64 {
	if r.End >= MaxOffset {
		return 0
	}
	return r.End - r.Start + 1
}

func (r Range) overlaps(o Range) bool { return r.Start <= o.End && o.Start <= r.End }

// touches reports whether r and o overlap or are adjacent.
func (r Range) touches(o Range) bool { return r.Start <= o.End+1 && o.Start <= r.End+1 }

// Held is one lock held on a file.
type Held struct {
	Owner     Owner
	Exclusive bool
	Range     Range
}

// Holder returns h as an nlm4_holder.
func (h *Held) Holder() *nlm.Holder {
	return &nlm.Holder{
		Exclusive: h.Exclusive,
		Svid:      h.Owner.Svid,
		OH:        []byte(h.Owner.OH),
		Offset:    h.Range.Start,
		Length:    h.Range.Length(),
	}
}

// locks is the set of POSIX byte-range locks held on one file. A lock
// owner's ranges never overlap each other, and adjacent or overlapping
// ranges of one owner and one kind are merged, as fcntl(2) F_SETLK keeps
// them. It is not safe for concurrent use.
type locks struct {
	held []Held
}

// conflict returns a lock of another owner that overlaps r and is
// exclusive or would be met by an exclusive request, or nil.
func (l *locks) conflict(o Owner, exclusive bool, r Range) *Held {
	for i := range l.held {
		h := &l.held[i]
		if h.Owner != o && h.Range.overlaps(r) && (exclusive || h.Exclusive) {
			return h
		}
	}
	return nil
}

// set gives owner o a lock of the given kind on r, replacing (upgrading,
// downgrading, splitting) its locks there and merging with its adjacent
// locks of the same kind. The caller has checked conflict.
func (l *locks) set(o Owner, exclusive bool, r Range) {
	out := l.held[:0:0]
	for _, h := range l.held {
		switch {
		case h.Owner != o:
			out = append(out, h)
		case h.Exclusive == exclusive && h.Range.touches(r):
			r.Start, r.End = min(r.Start, h.Range.Start), max(r.End, h.Range.End)
		default:
			out = appendOutside(out, h, r)
		}
	}
	l.held = append(out, Held{Owner: o, Exclusive: exclusive, Range: r})
}

// unlock releases owner o's locks on r, splitting a lock that extends
// past r on both sides. It reports whether anything was released.
func (l *locks) unlock(o Owner, r Range) bool {
	out := l.held[:0:0]
	changed := false
	for _, h := range l.held {
		if h.Owner != o || !h.Range.overlaps(r) {
			out = append(out, h)
			continue
		}
		changed = true
		out = appendOutside(out, h, r)
	}
	l.held = out
	return changed
}

// removeIf drops every lock for which drop is true and reports whether
// any was dropped.
func (l *locks) removeIf(drop func(*Held) bool) bool {
	out := l.held[:0]
	for i := range l.held {
		if !drop(&l.held[i]) {
			out = append(out, l.held[i])
		}
	}
	changed := len(out) != len(l.held)
	clear(l.held[len(out):])
	l.held = out
	return changed
}

// appendOutside appends the parts of h outside r (none, one or two).
func appendOutside(out []Held, h Held, r Range) []Held {
	if !h.Range.overlaps(r) {
		return append(out, h)
	}
	if h.Range.Start < r.Start {
		left := h
		left.Range.End = r.Start - 1
		out = append(out, left)
	}
	if h.Range.End > r.End {
		right := h
		right.Range.Start = r.End + 1
		out = append(out, right)
	}
	return out
}
