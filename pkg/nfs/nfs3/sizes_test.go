package nfs3

import (
	"fmt"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func TestMaxResultSizeTable(t *testing.T) {
	want := map[uint32]int{
		ProcNull: 0, ProcGetattr: 88, ProcSetattr: 120, ProcLookup: 248,
		ProcAccess: 96, ProcReadlink: 96, ProcRead: 104, ProcWrite: 136,
		ProcCreate: 280, ProcMkdir: 280, ProcSymlink: 280, ProcMknod: 280,
		ProcRemove: 120, ProcRmdir: 120, ProcRename: 236, ProcLink: 208,
		ProcFsstat: 144, ProcFsinfo: 140, ProcPathconf: 116, ProcCommit: 128,
	}
	for p := uint32(0); p < NumProcs; p++ {
		if p == ProcReaddir || p == ProcReaddirplus {
			continue
		}
		if got := MaxResultSize(p, nil); got != want[p] {
			t.Errorf("%s: %d, want %d", ProcName(p), got, want[p])
		}
	}
	for _, c := range []struct {
		proc uint32
		args any
		want int
	}{
		{ProcReaddir, &ReaddirArgs{Count: 4096}, 108 + 4096},
		{ProcReaddir, ReaddirArgs{Count: 4095}, 108 + 4096},
		{ProcReaddir, &ReaddirArgs{Count: 0}, 108},
		{ProcReaddir, nil, -1},
		{ProcReaddir, (*ReaddirArgs)(nil), -1},
		{ProcReaddir, &ReaddirplusArgs{}, -1},
		{ProcReaddirplus, &ReaddirplusArgs{DirCount: 512, MaxCount: 32768}, 108 + 32768},
		{ProcReaddirplus, ReaddirplusArgs{MaxCount: 1}, 112},
		{ProcReaddirplus, nil, -1},
		{ProcReaddirplus, &ReaddirplusArgs{MaxCount: 0xffffffff}, 108 + 1<<32},
		{22, nil, -1},
	} {
		if got := MaxResultSize(c.proc, c.args); got != c.want {
			t.Errorf("%s %+v: %d, want %d", ProcName(c.proc), c.args, got, c.want)
		}
	}
	for _, c := range []struct {
		proc uint32
		args any
		want int
	}{
		{ProcRead, &ReadArgs{Count: 1 << 20}, 1 << 20},
		{ProcRead, ReadArgs{Count: 5}, 8},
		{ProcRead, nil, -1},
		{ProcReadlink, nil, 4096},
		{ProcWrite, nil, 0},
		{ProcGetattr, nil, 0},
		{99, nil, -1},
	} {
		if got := MaxResultDDPSize(c.proc, c.args); got != c.want {
			t.Errorf("DDP %s %+v: %d, want %d", ProcName(c.proc), c.args, got, c.want)
		}
	}
}

// maximal returns the largest result of proc that does not depend on the
// arguments: every optional item present, 64-byte handles.
func maximal(proc uint32) any {
	attr := Attrs(sampleFattr(0))
	wcc := WccData{Before: PreOpAttr{Set: true}, After: attr}
	h := fh(FHSize, 1)
	switch proc {
	case ProcGetattr:
		return &GetattrRes{Attr: attr.Attr}
	case ProcSetattr:
		return &SetattrRes{Wcc: wcc}
	case ProcLookup:
		return &LookupRes{Object: h, ObjAttr: attr, DirAttr: attr}
	case ProcAccess:
		return &AccessRes{Attr: attr}
	case ProcReadlink:
		return &ReadlinkRes{Attr: attr, Path: make([]byte, MaxPathLen)}
	case ProcRead:
		return &ReadRes{Attr: attr, Data: make([]byte, 1000)}
	case ProcWrite:
		return &WriteRes{Wcc: wcc}
	case ProcCreate, ProcMkdir, ProcSymlink, ProcMknod:
		return &CreateRes{Obj: Handle(h), ObjAttr: attr, DirWcc: wcc}
	case ProcRemove, ProcRmdir:
		return &RemoveRes{DirWcc: wcc}
	case ProcRename:
		return &RenameRes{FromDirWcc: wcc, ToDirWcc: wcc}
	case ProcLink:
		return &LinkRes{FileAttr: attr, LinkDirWcc: wcc}
	case ProcFsstat:
		return &FsstatRes{Attr: attr}
	case ProcFsinfo:
		return &FsinfoRes{Attr: attr}
	case ProcPathconf:
		return &PathconfRes{Attr: attr}
	case ProcCommit:
		return &CommitRes{Wcc: wcc}
	}
	return nil
}

// The bounds are reached exactly by maximal results, and no sample exceeds them.
func TestMaxResultSizeIsTight(t *testing.T) {
	for p := uint32(1); p < NumProcs; p++ {
		if p == ProcReaddir || p == ProcReaddirplus {
			continue
		}
		v := maximal(p)
		var n, ddp int
		if m, ok := v.(DDPMessage); ok {
			head, payload := encodeSplit(m)
			n, ddp = len(head), xdr.RoundUp(len(payload))
		} else {
			n = len(encodeInline(v))
		}
		if n != MaxResultSize(p, nil) {
			t.Errorf("%s: maximal result %d bytes, bound %d", ProcName(p), n, MaxResultSize(p, nil))
		}
		if p == ProcReadlink && ddp != MaxResultDDPSize(p, nil) {
			t.Errorf("READLINK path %d, bound %d", ddp, MaxResultDDPSize(p, nil))
		}
	}
	for _, s := range resSamples() {
		if s.proc == ProcReaddir || s.proc == ProcReaddirplus {
			continue
		}
		var n int
		if m, ok := s.v.(DDPMessage); ok {
			head, _ := encodeSplit(m)
			n = len(head)
		} else {
			n = len(encodeInline(s.v))
		}
		if n > MaxResultSize(s.proc, nil) {
			t.Errorf("%s: %d bytes > bound %d", s.name, n, MaxResultSize(s.proc, nil))
		}
	}
}

// A server filling READDIR and READDIRPLUS replies entry by entry with
// Size stays within count, and the reply within MaxResultSize.
func TestReaddirFillWithinCount(t *testing.T) {
	for _, count := range []uint32{128, 500, 1024, 4096, 32768} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			args := ReaddirArgs{Count: count}
			res := ReaddirRes{DirAttr: Attrs(sampleFattr(0))}
			used := res.ResOKSize()
			for i := 0; ; i++ {
				ent := Entry{FileID: uint64(i), Name: longName(1 + i%MaxNameLen), Cookie: uint64(i + 1)}
				if used+ent.Size() > int(count) {
					break
				}
				used += ent.Size()
				res.Entries = append(res.Entries, ent)
			}
			b := encodeInline(&res)
			if used != res.ResOKSize() || len(b) != 4+used {
				t.Fatalf("running size %d, ResOKSize %d, encoded %d", used, res.ResOKSize(), len(b))
			}
			if len(b)-4 > int(count) || len(b) > MaxResultSize(ProcReaddir, &args) {
				t.Fatalf("encoded %d bytes for count %d, bound %d", len(b), count, MaxResultSize(ProcReaddir, &args))
			}
		})
		t.Run(fmt.Sprint("plus", count), func(t *testing.T) {
			args := ReaddirplusArgs{DirCount: count / 8, MaxCount: count}
			res := ReaddirplusRes{DirAttr: Attrs(sampleFattr(0))}
			used := res.ResOKSize()
			for i := 0; ; i++ {
				ent := EntryPlus{FileID: uint64(i), Name: longName(1 + (i*37)%MaxNameLen), Cookie: uint64(i + 1),
					Attr: Attrs(sampleFattr(uint32(i))), Handle: Handle(fh(1+i%FHSize, byte(i)))}
				if i%3 == 0 {
					ent.Attr = PostOpAttr{}
				}
				if used+ent.Size() > int(count) {
					break
				}
				used += ent.Size()
				res.Entries = append(res.Entries, ent)
			}
			b := encodeInline(&res)
			if used != res.ResOKSize() || len(b) != 4+used {
				t.Fatalf("running size %d, ResOKSize %d, encoded %d", used, res.ResOKSize(), len(b))
			}
			if len(b)-4 > int(count) || len(b) > MaxResultSize(ProcReaddirplus, &args) {
				t.Fatalf("encoded %d bytes for maxcount %d", len(b), count)
			}
			var back ReaddirplusRes
			if err := back.Decode(xdr.NewDecoder(b)); err != nil || len(back.Entries) != len(res.Entries) {
				t.Fatalf("decode: %v, %d entries of %d", err, len(back.Entries), len(res.Entries))
			}
		})
	}
}

// A lax server (Linux knfsd) applies count to the entries alone; the bound
// still holds.
func TestReaddirBoundLaxServer(t *testing.T) {
	const count = 4096
	res := ReaddirRes{DirAttr: Attrs(sampleFattr(0)), Verf: CookieVerf{1}}
	entries := 0
	for i := 0; ; i++ {
		ent := Entry{Name: longName(MaxNameLen)}
		if entries+ent.Size() > count {
			break
		}
		entries += ent.Size()
		res.Entries = append(res.Entries, ent)
	}
	if n := len(encodeInline(&res)); n > MaxResultSize(ProcReaddir, &ReaddirArgs{Count: count}) {
		t.Fatalf("%d bytes > bound", n)
	}
}

func TestEntrySizes(t *testing.T) {
	e := Entry{Name: "abcde"}
	if e.Size() != 4+8+4+8+8 {
		t.Fatal(e.Size())
	}
	p := EntryPlus{Name: longName(MaxNameLen), Attr: Attrs(Fattr{}), Handle: Handle(fh(FHSize, 0))}
	if p.Size() != 440 || p.DirSize() != 8+4+256+8 {
		t.Fatal(p.Size(), p.DirSize())
	}
	enc := xdr.NewEncoder(nil)
	p.encode(enc)
	if enc.Len() != p.Size() {
		t.Fatalf("encoded %d, Size %d", enc.Len(), p.Size())
	}
}
