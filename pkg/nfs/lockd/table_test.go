package lockd

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
)

var (
	ownA  = Owner{Caller: "node-a", OH: "1@node-a", Svid: 1}
	ownA2 = Owner{Caller: "node-a", OH: "2@node-a", Svid: 2}
	ownB  = Owner{Caller: "node-b", OH: "1@node-b", Svid: 1}
	// same svid and caller as ownA, another owner handle: another owner
	ownAoh = Owner{Caller: "node-a", OH: "other", Svid: 1}
	// same oh and svid as ownA from another host: another owner
	ownAhost = Owner{Caller: "node-c", OH: "1@node-a", Svid: 1}
)

// op is one step of a table test: set (S shared, X exclusive), unlock (U),
// or a conflict check (C?, expecting a conflict or not).
type op struct {
	kind   byte // 'S', 'X', 'U'
	o      Owner
	r      Range
	denied bool // for S/X: the request conflicts and is not applied
}

func show(l *locks) string {
	hs := l.held()
	slices.SortFunc(hs, func(a, b Held) int {
		if c := cmp.Compare(a.Range.Start, b.Range.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Owner.OH+a.Owner.Caller, b.Owner.OH+b.Owner.Caller)
	})
	var parts []string
	for _, h := range hs {
		k := "S"
		if h.Exclusive {
			k = "X"
		}
		end := fmt.Sprint(h.Range.End)
		if h.Range.End == MaxOffset {
			end = "EOF"
		}
		parts = append(parts, fmt.Sprintf("%s:%s%d-%s", h.Owner.Caller+"/"+h.Owner.OH, k, h.Range.Start, end))
	}
	return strings.Join(parts, " ")
}

func TestLocks(t *testing.T) {
	const eof = MaxOffset
	a, b := "node-a/1@node-a", "node-b/1@node-b"
	cases := []struct {
		name string
		ops  []op
		want string
	}{
		{"shared locks coexist", []op{{'S', ownA, Range{0, 9}, false}, {'S', ownB, Range{5, 14}, false}},
			a + ":S0-9 " + b + ":S5-14"},
		{"exclusive conflicts with shared", []op{{'S', ownA, Range{0, 9}, false}, {'X', ownB, Range{9, 20}, true}},
			a + ":S0-9"},
		{"shared conflicts with exclusive", []op{{'X', ownA, Range{10, 19}, false}, {'S', ownB, Range{0, 10}, true}},
			a + ":X10-19"},
		{"adjacent ranges do not conflict", []op{{'X', ownA, Range{10, 19}, false}, {'X', ownB, Range{20, 29}, false}, {'X', ownB, Range{0, 9}, false}},
			b + ":X0-9 " + a + ":X10-19 " + b + ":X20-29"},
		{"own locks never conflict", []op{{'X', ownA, Range{0, 9}, false}, {'X', ownA, Range{5, 14}, false}},
			a + ":X0-14"},
		{"merge adjacent same kind", []op{{'S', ownA, Range{0, 9}, false}, {'S', ownA, Range{10, 19}, false}, {'S', ownA, Range{30, 39}, false}, {'S', ownA, Range{20, 29}, false}},
			a + ":S0-39"},
		{"no merge across kinds", []op{{'S', ownA, Range{0, 9}, false}, {'X', ownA, Range{10, 19}, false}},
			a + ":S0-9 " + a + ":X10-19"},
		{"upgrade middle splits", []op{{'S', ownA, Range{0, 99}, false}, {'X', ownA, Range{40, 59}, false}},
			a + ":S0-39 " + a + ":X40-59 " + a + ":S60-99"},
		{"downgrade whole", []op{{'X', ownA, Range{0, 99}, false}, {'S', ownA, Range{0, 99}, false}, {'S', ownB, Range{50, 50}, false}},
			a + ":S0-99 " + b + ":S50-50"},
		{"upgrade denied by other reader", []op{{'S', ownA, Range{0, 99}, false}, {'S', ownB, Range{50, 50}, false}, {'X', ownA, Range{0, 99}, true}},
			a + ":S0-99 " + b + ":S50-50"},
		{"upgrade then re-merge", []op{{'X', ownA, Range{0, 9}, false}, {'S', ownA, Range{3, 5}, false}, {'X', ownA, Range{3, 5}, false}},
			a + ":X0-9"},
		{"unlock middle splits", []op{{'X', ownA, Range{0, 99}, false}, {'U', ownA, Range{10, 19}, false}},
			a + ":X0-9 " + a + ":X20-99"},
		{"unlock spanning several", []op{{'X', ownA, Range{0, 9}, false}, {'S', ownA, Range{20, 29}, false}, {'X', ownA, Range{40, 49}, false}, {'U', ownA, Range{5, 44}, false}},
			a + ":X0-4 " + a + ":X45-49"},
		{"unlock of another owner's lock does nothing", []op{{'X', ownA, Range{0, 9}, false}, {'U', ownB, Range{0, 9}, false}},
			a + ":X0-9"},
		{"unlock to EOF", []op{{'X', ownA, Range{0, eof}, false}, {'U', ownA, Range{100, eof}, false}},
			a + ":X0-99"},
		{"to EOF conflicts far away", []op{{'X', ownA, Range{1 << 40, eof}, false}, {'S', ownB, Range{eof, eof}, true}, {'S', ownB, Range{0, 1<<40 - 1}, false}},
			b + ":S0-1099511627775 " + a + ":X1099511627776-EOF"},
		{"owner handle distinguishes owners", []op{{'X', ownA, Range{0, 9}, false}, {'X', ownAoh, Range{0, 9}, true}, {'X', ownA2, Range{0, 9}, true}, {'X', ownAhost, Range{0, 9}, true}},
			a + ":X0-9"},
		{"unlock all releases", []op{{'X', ownA, Range{0, 9}, false}, {'U', ownA, Range{0, eof}, false}, {'X', ownB, Range{0, 9}, false}},
			b + ":X0-9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var l locks
			for i, o := range c.ops {
				switch o.kind {
				case 'U':
					l.unlock(o.o, o.r)
				default:
					excl := o.kind == 'X'
					h, ok := l.conflict(o.o, excl, o.r)
					if ok != o.denied {
						t.Fatalf("op %d %c %v: conflict %v %v, want denied=%v (held: %s)", i, o.kind, o.r, h, ok, o.denied, show(&l))
					}
					if !ok {
						l.set(o.o, excl, o.r)
					}
				}
			}
			if got := show(&l); got != c.want {
				t.Fatalf("held\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestRangeOf(t *testing.T) {
	cases := []struct {
		off, len uint64
		want     Range
		st       nlm.Stat
	}{
		{0, 0, Range{0, MaxOffset}, nlm.Granted},
		{0, 1, Range{0, 0}, nlm.Granted},
		{100, 50, Range{100, 149}, nlm.Granted},
		{MaxOffset, 0, Range{MaxOffset, MaxOffset}, nlm.Granted},
		{MaxOffset, 1, Range{MaxOffset, MaxOffset}, nlm.Granted},
		{MaxOffset, 2, Range{}, nlm.FBig},
		{MaxOffset + 1, 0, Range{}, nlm.FBig},
		{^uint64(0), 1, Range{}, nlm.FBig},
		{1, MaxOffset, Range{1, MaxOffset}, nlm.Granted},
		{2, MaxOffset, Range{}, nlm.FBig},
		{0, ^uint64(0), Range{}, nlm.FBig}, // offset+length wraps 2^64
		{10, 1 << 63, Range{}, nlm.FBig},
	}
	for _, c := range cases {
		r, st := RangeOf(c.off, c.len)
		if r != c.want || st != c.st {
			t.Errorf("RangeOf(%d, %d) = %v %v, want %v %v", c.off, c.len, r, st, c.want, c.st)
		}
		if st == nlm.Granted {
			if l := r.Length(); l != c.len && !(c.len == 0 || r.End == MaxOffset) {
				t.Errorf("Length of %v = %d", r, l)
			}
		}
	}
	if (Range{5, MaxOffset}).Length() != 0 || (Range{5, 9}).Length() != 5 {
		t.Error("Length")
	}
}

func TestHolder(t *testing.T) {
	h := Held{Owner: ownB, Exclusive: true, Range: Range{7, MaxOffset}}
	got := h.Holder()
	if !got.Exclusive || got.Svid != 1 || string(got.OH) != "1@node-b" || got.Offset != 7 || got.Length != 0 {
		t.Fatalf("%+v", got)
	}
}
