package nfs3

import (
	"bytes"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// newArgs returns a new zero argument value for proc (nil for NULL).
func newArgs(proc uint32) any {
	switch proc {
	case ProcGetattr:
		return new(GetattrArgs)
	case ProcSetattr:
		return new(SetattrArgs)
	case ProcLookup:
		return new(LookupArgs)
	case ProcAccess:
		return new(AccessArgs)
	case ProcReadlink:
		return new(ReadlinkArgs)
	case ProcRead:
		return new(ReadArgs)
	case ProcWrite:
		return new(WriteArgs)
	case ProcCreate:
		return new(CreateArgs)
	case ProcMkdir:
		return new(MkdirArgs)
	case ProcSymlink:
		return new(SymlinkArgs)
	case ProcMknod:
		return new(MknodArgs)
	case ProcRemove:
		return new(RemoveArgs)
	case ProcRmdir:
		return new(RmdirArgs)
	case ProcRename:
		return new(RenameArgs)
	case ProcLink:
		return new(LinkArgs)
	case ProcReaddir:
		return new(ReaddirArgs)
	case ProcReaddirplus:
		return new(ReaddirplusArgs)
	case ProcFsstat:
		return new(FsstatArgs)
	case ProcFsinfo:
		return new(FsinfoArgs)
	case ProcPathconf:
		return new(PathconfArgs)
	case ProcCommit:
		return new(CommitArgs)
	}
	return nil
}

// newRes returns a new zero result value for proc (nil for NULL).
func newRes(proc uint32) any {
	switch proc {
	case ProcGetattr:
		return new(GetattrRes)
	case ProcSetattr:
		return new(SetattrRes)
	case ProcLookup:
		return new(LookupRes)
	case ProcAccess:
		return new(AccessRes)
	case ProcReadlink:
		return new(ReadlinkRes)
	case ProcRead:
		return new(ReadRes)
	case ProcWrite:
		return new(WriteRes)
	case ProcCreate, ProcMkdir, ProcSymlink, ProcMknod:
		return new(CreateRes)
	case ProcRemove, ProcRmdir:
		return new(RemoveRes)
	case ProcRename:
		return new(RenameRes)
	case ProcLink:
		return new(LinkRes)
	case ProcReaddir:
		return new(ReaddirRes)
	case ProcReaddirplus:
		return new(ReaddirplusRes)
	case ProcFsstat:
		return new(FsstatRes)
	case ProcFsinfo:
		return new(FsinfoRes)
	case ProcPathconf:
		return new(PathconfRes)
	case ProcCommit:
		return new(CommitRes)
	}
	return nil
}

// encodeInline returns the whole inline encoding of v.
func encodeInline(v any) []byte {
	e := xdr.NewEncoder(nil)
	switch m := v.(type) {
	case Message:
		m.Encode(e)
	case DDPMessage:
		m.EncodeInline(e)
	default:
		panic(fmt.Sprintf("%T is not a message", v))
	}
	return e.Bytes()
}

// encodeSplit returns the head (up to the DDP item's length word) and the
// item of a DDPMessage.
func encodeSplit(m DDPMessage) (head, payload []byte) {
	e := xdr.NewEncoder(nil)
	payload = m.Encode(e)
	return e.Bytes(), payload
}

// decodeInto decodes b into v, the DDP item from payload if placed, and
// returns the bytes consumed.
func decodeInto(v any, b, payload []byte, placed bool) (int, error) {
	d := xdr.NewDecoder(b)
	var err error
	switch m := v.(type) {
	case Message:
		err = m.Decode(d)
	case DDPMessage:
		err = m.Decode(d, payload, placed)
	default:
		panic(fmt.Sprintf("%T is not a message", v))
	}
	return d.Offset(), err
}

func fh(n int, seed byte) FH {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return MustFH(b)
}

func sampleFattr(seed uint32) Fattr {
	return Fattr{
		Type: TypeReg, Mode: 0o644 | ModeSetGID, Nlink: 2 + seed, UID: 1000, GID: 100,
		Size: 1<<33 + uint64(seed), Used: 1 << 34, Rdev: SpecData{Major: 8, Minor: 1},
		FSID: 0x1122334455667788, FileID: 0xdeadbeef00 + uint64(seed),
		Atime: Time{1700000000, 1}, Mtime: Time{1700000001, 999999999}, Ctime: Time{1700000002, 3},
	}
}

func sampleWcc() WccData {
	return WccData{
		Before: PreOpAttr{Set: true, Attr: WccAttr{Size: 4096, Mtime: Time{10, 20}, Ctime: Time{30, 40}}},
		After:  Attrs(sampleFattr(7)),
	}
}

func fullSattr() Sattr {
	return Sattr{
		SetMode: true, Mode: 0o755, SetUID: true, UID: 1, SetGID: true, GID: 2,
		SetSize: true, Size: 1 << 40,
		Atime: SetTime{How: SetToClientTime, Time: Time{5, 6}},
		Mtime: SetTime{How: SetToClientTime, Time: Time{7, 8}},
	}
}

func bytesOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func longName(n int) string { return string(bytes.Repeat([]byte{'n'}, n)) }

type sample struct {
	name string
	proc uint32
	v    any
}

// argSamples covers every procedure's arguments and every union arm in them.
func argSamples() []sample {
	dir := DirOpArgs{Dir: fh(32, 1), Name: "file.txt"}
	return []sample{
		{"getattr", ProcGetattr, &GetattrArgs{Object: fh(64, 3)}},
		{"getattr/emptyfh", ProcGetattr, &GetattrArgs{}},
		{"setattr/full+guard", ProcSetattr, &SetattrArgs{Object: fh(28, 2), Attr: fullSattr(), Guard: SattrGuard{Check: true, Ctime: Time{9, 9}}}},
		{"setattr/none", ProcSetattr, &SetattrArgs{Object: fh(8, 2)}},
		{"setattr/servertime", ProcSetattr, &SetattrArgs{Object: fh(8, 2), Attr: Sattr{Atime: SetTime{How: SetToServerTime}, Mtime: SetTime{How: SetToServerTime}}}},
		{"lookup", ProcLookup, &LookupArgs{What: dir}},
		{"lookup/maxname", ProcLookup, &LookupArgs{What: DirOpArgs{Dir: fh(64, 1), Name: longName(MaxNameLen)}}},
		{"access", ProcAccess, &AccessArgs{Object: fh(16, 4), Access: AccessRead | AccessLookup | AccessModify | AccessExtend | AccessDelete | AccessExecute}},
		{"readlink", ProcReadlink, &ReadlinkArgs{Symlink: fh(12, 5)}},
		{"read", ProcRead, &ReadArgs{File: fh(20, 6), Offset: 1 << 42, Count: 1 << 20}},
		{"write/unstable", ProcWrite, &WriteArgs{File: fh(20, 7), Offset: 4096, Stable: Unstable, Data: bytesOf(1001, 1)}},
		{"write/filesync", ProcWrite, &WriteArgs{File: fh(20, 7), Offset: 0, Stable: FileSync, Data: bytesOf(4096, 2)}},
		{"write/datasync/empty", ProcWrite, &WriteArgs{File: fh(20, 7), Stable: DataSync}},
		{"create/unchecked", ProcCreate, &CreateArgs{Where: dir, How: CreateHow{Mode: Unchecked, Attr: fullSattr()}}},
		{"create/guarded", ProcCreate, &CreateArgs{Where: dir, How: CreateHow{Mode: Guarded, Attr: Sattr{SetMode: true, Mode: 0o600}}}},
		{"create/exclusive", ProcCreate, &CreateArgs{Where: dir, How: CreateHow{Mode: Exclusive, Verf: CreateVerf{1, 2, 3, 4, 5, 6, 7, 8}}}},
		{"mkdir", ProcMkdir, &MkdirArgs{Where: dir, Attr: Sattr{SetMode: true, Mode: 0o700}}},
		{"symlink", ProcSymlink, &SymlinkArgs{Where: dir, Attr: Sattr{SetMode: true, Mode: 0o777}, Path: []byte("../target/x")}},
		{"symlink/maxpath", ProcSymlink, &SymlinkArgs{Where: dir, Path: bytes.Repeat([]byte("a"), MaxPathLen)}},
		{"mknod/chr", ProcMknod, &MknodArgs{Where: dir, Type: TypeChr, Attr: fullSattr(), Spec: SpecData{1, 3}}},
		{"mknod/blk", ProcMknod, &MknodArgs{Where: dir, Type: TypeBlk, Attr: Sattr{SetMode: true, Mode: 0o660}, Spec: SpecData{8, 0}}},
		{"mknod/fifo", ProcMknod, &MknodArgs{Where: dir, Type: TypeFIFO, Attr: Sattr{SetUID: true, UID: 5}}},
		{"mknod/sock", ProcMknod, &MknodArgs{Where: dir, Type: TypeSock}},
		{"mknod/reg(void arm)", ProcMknod, &MknodArgs{Where: dir, Type: TypeReg}},
		{"remove", ProcRemove, &RemoveArgs{Object: dir}},
		{"rmdir", ProcRmdir, &RmdirArgs{Object: DirOpArgs{Dir: fh(4, 9), Name: "d"}}},
		{"rename", ProcRename, &RenameArgs{From: dir, To: DirOpArgs{Dir: fh(40, 9), Name: "new name"}}},
		{"link", ProcLink, &LinkArgs{File: fh(24, 8), Link: dir}},
		{"readdir", ProcReaddir, &ReaddirArgs{Dir: fh(32, 1), Cookie: 77, Verf: CookieVerf{9, 8, 7, 6, 5, 4, 3, 2}, Count: 8192}},
		{"readdirplus", ProcReaddirplus, &ReaddirplusArgs{Dir: fh(32, 1), Cookie: 78, Verf: CookieVerf{1}, DirCount: 4096, MaxCount: 32768}},
		{"fsstat", ProcFsstat, &FsstatArgs{FSRoot: fh(32, 1)}},
		{"fsinfo", ProcFsinfo, &FsinfoArgs{FSRoot: fh(32, 1)}},
		{"pathconf", ProcPathconf, &PathconfArgs{Object: fh(32, 1)}},
		{"commit", ProcCommit, &CommitArgs{File: fh(32, 1), Offset: 1 << 30, Count: 0}},
	}
}

// resSamples covers every procedure's results, both arms of every union,
// and the optional items present and absent.
func resSamples() []sample {
	wcc := sampleWcc()
	attr := Attrs(sampleFattr(1))
	return []sample{
		{"getattr/ok", ProcGetattr, &GetattrRes{Status: OK, Attr: sampleFattr(0)}},
		{"getattr/fail", ProcGetattr, &GetattrRes{Status: ErrStale}},
		{"setattr/ok", ProcSetattr, &SetattrRes{Status: OK, Wcc: wcc}},
		{"setattr/fail", ProcSetattr, &SetattrRes{Status: ErrNotSync, Wcc: WccData{After: attr}}},
		{"lookup/ok", ProcLookup, &LookupRes{Status: OK, Object: fh(64, 1), ObjAttr: attr, DirAttr: Attrs(sampleFattr(2))}},
		{"lookup/ok/noattrs", ProcLookup, &LookupRes{Status: OK, Object: fh(8, 1)}},
		{"lookup/fail", ProcLookup, &LookupRes{Status: ErrNoEnt, DirAttr: attr}},
		{"access/ok", ProcAccess, &AccessRes{Status: OK, Attr: attr, Access: AccessRead | AccessExecute}},
		{"access/fail", ProcAccess, &AccessRes{Status: ErrAccess}},
		{"readlink/ok", ProcReadlink, &ReadlinkRes{Status: OK, Attr: attr, Path: []byte("/a/b/c")}},
		{"readlink/ok/maxpath", ProcReadlink, &ReadlinkRes{Status: OK, Path: bytes.Repeat([]byte("p"), MaxPathLen)}},
		{"readlink/fail", ProcReadlink, &ReadlinkRes{Status: ErrInval, Attr: attr}},
		{"read/ok", ProcRead, &ReadRes{Status: OK, Attr: attr, EOF: false, Data: bytesOf(8191, 3)}},
		{"read/ok/eof/empty", ProcRead, &ReadRes{Status: OK, EOF: true}},
		{"read/fail", ProcRead, &ReadRes{Status: ErrIsDir, Attr: attr}},
		{"write/ok", ProcWrite, &WriteRes{Status: OK, Wcc: wcc, Count: 4096, Committed: FileSync, Verf: WriteVerf{1, 1, 2, 3, 5, 8, 13, 21}}},
		{"write/fail", ProcWrite, &WriteRes{Status: ErrNoSpc, Wcc: wcc}},
		{"create/ok", ProcCreate, &CreateRes{Status: OK, Obj: Handle(fh(64, 4)), ObjAttr: attr, DirWcc: wcc}},
		{"create/ok/nofh", ProcCreate, &CreateRes{Status: OK}},
		{"create/fail", ProcCreate, &CreateRes{Status: ErrExist, DirWcc: wcc}},
		{"mkdir/ok", ProcMkdir, &MkdirRes{Status: OK, Obj: Handle(fh(16, 4)), DirWcc: wcc}},
		{"mkdir/fail", ProcMkdir, &MkdirRes{Status: ErrDQuot, DirWcc: wcc}},
		{"symlink/ok", ProcSymlink, &SymlinkRes{Status: OK, Obj: Handle(fh(20, 5)), ObjAttr: Attrs(Fattr{Type: TypeLnk, Size: 11})}},
		{"mknod/ok", ProcMknod, &MknodRes{Status: OK, Obj: Handle(fh(20, 6)), ObjAttr: Attrs(Fattr{Type: TypeChr, Rdev: SpecData{1, 3}}), DirWcc: wcc}},
		{"rmdir/ok", ProcRmdir, &RmdirRes{Status: OK, DirWcc: wcc}},
		{"symlink/fail", ProcSymlink, &SymlinkRes{Status: ErrNameTooLong}},
		{"mknod/fail", ProcMknod, &MknodRes{Status: ErrBadType, DirWcc: WccData{Before: wcc.Before}}},
		{"remove/ok", ProcRemove, &RemoveRes{Status: OK, DirWcc: wcc}},
		{"remove/fail", ProcRemove, &RemoveRes{Status: ErrNoEnt}},
		{"rmdir/fail", ProcRmdir, &RmdirRes{Status: ErrNotEmpty, DirWcc: wcc}},
		{"rename/ok", ProcRename, &RenameRes{Status: OK, FromDirWcc: wcc, ToDirWcc: WccData{After: attr}}},
		{"rename/fail", ProcRename, &RenameRes{Status: ErrXDev, FromDirWcc: wcc, ToDirWcc: wcc}},
		{"link/ok", ProcLink, &LinkRes{Status: OK, FileAttr: attr, LinkDirWcc: wcc}},
		{"link/fail", ProcLink, &LinkRes{Status: ErrMLink}},
		{"readdir/ok", ProcReaddir, &ReaddirRes{Status: OK, DirAttr: attr, Verf: CookieVerf{1, 2}, EOF: true, Entries: []Entry{
			{FileID: 1, Name: ".", Cookie: 1}, {FileID: 2, Name: "..", Cookie: 2}, {FileID: 99, Name: longName(MaxNameLen), Cookie: 3}, {FileID: 5, Name: "", Cookie: 4},
		}}},
		{"readdir/ok/empty", ProcReaddir, &ReaddirRes{Status: OK}},
		{"readdir/fail", ProcReaddir, &ReaddirRes{Status: ErrBadCookie, DirAttr: attr}},
		{"readdirplus/ok", ProcReaddirplus, &ReaddirplusRes{Status: OK, DirAttr: attr, Verf: CookieVerf{3}, Entries: []EntryPlus{
			{FileID: 1, Name: "a", Cookie: 10, Attr: attr, Handle: Handle(fh(64, 1))},
			{FileID: 2, Name: "bb", Cookie: 20},
			{FileID: 3, Name: "ccc", Cookie: 30, Handle: Handle(fh(3, 3))},
		}}},
		{"readdirplus/ok/eof", ProcReaddirplus, &ReaddirplusRes{Status: OK, EOF: true}},
		{"readdirplus/fail", ProcReaddirplus, &ReaddirplusRes{Status: ErrTooSmall}},
		{"fsstat/ok", ProcFsstat, &FsstatRes{Status: OK, Attr: attr, TBytes: 1 << 50, FBytes: 1 << 49, ABytes: 1 << 48, TFiles: 1e9, FFiles: 1e8, AFiles: 1e7, Invarsec: 0}},
		{"fsstat/fail", ProcFsstat, &FsstatRes{Status: ErrIO, Attr: attr}},
		{"fsinfo/ok", ProcFsinfo, &FsinfoRes{Status: OK, Attr: attr, RTMax: 1 << 20, RTPref: 1 << 20, RTMult: 4096, WTMax: 1 << 20, WTPref: 1 << 20, WTMult: 4096, DTPref: 1 << 16, MaxFileSize: 1<<63 - 1, TimeDelta: Time{0, 1}, Properties: FSFLink | FSFSymlink | FSFHomogeneous | FSFCanSetTime}},
		{"fsinfo/fail", ProcFsinfo, &FsinfoRes{Status: ErrServerFault}},
		{"pathconf/ok", ProcPathconf, &PathconfRes{Status: OK, Attr: attr, LinkMax: 32000, NameMax: 255, NoTrunc: true, ChownRestricted: true, CaseInsensitive: false, CasePreserving: true}},
		{"pathconf/fail", ProcPathconf, &PathconfRes{Status: ErrStale, Attr: attr}},
		{"commit/ok", ProcCommit, &CommitRes{Status: OK, Wcc: wcc, Verf: WriteVerf{8, 7, 6, 5, 4, 3, 2, 1}}},
		{"commit/fail", ProcCommit, &CommitRes{Status: ErrJukebox, Wcc: wcc}},
		{"unknown status selects resfail", ProcGetattr, &GetattrRes{Status: Status(4242)}},
	}
}
