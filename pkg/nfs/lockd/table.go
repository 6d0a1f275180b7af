package lockd

import (
	"github.com/nfsrdma/nfsrdma-csi/internal/posixlock"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
)

// MaxOffset is the largest byte offset a lock may cover, 2^63-1, as Linux
// lockd's OFFSET_MAX: NLM v4 ranges map onto signed 64-bit file offsets.
const MaxOffset = posixlock.MaxOffset

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
	start, end, ok := posixlock.Span(offset, length)
	if !ok {
		return Range{}, nlm.FBig
	}
	return Range{start, end}, nlm.Granted
}

// Length returns the range as an NLM l_len: 0 when it reaches MaxOffset.
func (r Range) Length() uint64 { return posixlock.Length(r.Start, r.End) }

func (r Range) overlaps(o Range) bool { return r.Start <= o.End && o.Start <= r.End }

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

func heldOf(l posixlock.Lock[Owner]) Held {
	return Held{Owner: l.Owner, Exclusive: l.Exclusive, Range: Range{l.Start, l.End}}
}

// locks is the set of POSIX byte-range locks held on one file, by NLM
// lock owner (posixlock.Owners). It is not safe for concurrent use.
type locks struct {
	o posixlock.Owners[Owner]
}

// conflict returns the first lock of another owner that overlaps r and
// is exclusive or would be met by an exclusive request.
func (l *locks) conflict(o Owner, exclusive bool, r Range) (Held, bool) {
	h, ok := l.o.Conflict(o, r.Start, r.End, exclusive)
	return heldOf(h), ok
}

// set gives owner o a lock of the given kind on r, replacing (upgrading,
// downgrading, splitting) its locks there and merging with its adjacent
// locks of the same kind. The caller has checked conflict.
func (l *locks) set(o Owner, exclusive bool, r Range) { l.o.Set(o, r.Start, r.End, exclusive) }

// unlock releases owner o's locks on r, splitting a lock that extends
// past r on both sides. It reports whether anything was released.
func (l *locks) unlock(o Owner, r Range) bool { return l.o.Unlock(o, r.Start, r.End) }

// held returns a copy of the locks, in the order they were set.
func (l *locks) held() []Held {
	var out []Held
	for _, h := range l.o.Locks() {
		out = append(out, heldOf(h))
	}
	return out
}
