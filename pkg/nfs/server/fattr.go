package server

import (
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// fattr converts a stat to fattr3 (RFC 1813 section 2.6).
func fattr(st *unix.Stat_t) nfs3.Fattr {
	var t nfs3.FileType
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		t = nfs3.TypeReg
	case unix.S_IFDIR:
		t = nfs3.TypeDir
	case unix.S_IFBLK:
		t = nfs3.TypeBlk
	case unix.S_IFCHR:
		t = nfs3.TypeChr
	case unix.S_IFLNK:
		t = nfs3.TypeLnk
	case unix.S_IFSOCK:
		t = nfs3.TypeSock
	case unix.S_IFIFO:
		t = nfs3.TypeFIFO
	}
	return nfs3.Fattr{
		Type: t, Mode: st.Mode & 0o7777, Nlink: uint32(st.Nlink), UID: st.Uid, GID: st.Gid,
		Size: uint64(st.Size), Used: uint64(st.Blocks) * 512,
		Rdev: nfs3.SpecData{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)},
		FSID: st.Dev, FileID: st.Ino,
		Atime: nfsTime(st.Atim), Mtime: nfsTime(st.Mtim), Ctime: nfsTime(st.Ctim),
	}
}

func nfsTime(t unix.Timespec) nfs3.Time {
	return nfs3.Time{Seconds: uint32(t.Sec), Nseconds: uint32(t.Nsec)}
}

func wccAttr(st *unix.Stat_t) nfs3.PreOpAttr {
	return nfs3.PreOpAttr{Set: true, Attr: nfs3.WccAttr{Size: uint64(st.Size), Mtime: nfsTime(st.Mtim), Ctime: nfsTime(st.Ctim)}}
}

// postAttr returns the current attributes of fd, or none.
func postAttr(fd int) nfs3.PostOpAttr {
	var st unix.Stat_t
	if fd < 0 || unix.Fstat(fd, &st) != nil {
		return nfs3.PostOpAttr{}
	}
	return nfs3.Attrs(fattr(&st))
}

// wcc returns wcc_data with o's pre-operation attributes and its current
// ones (those a stat after the operation took, when posted).
func (o *obj) wcc() nfs3.WccData {
	if o.fd < 0 {
		return nfs3.WccData{}
	}
	if o.posted {
		return nfs3.WccData{Before: wccAttr(&o.st), After: nfs3.Attrs(fattr(&o.post))}
	}
	return nfs3.WccData{Before: wccAttr(&o.st), After: postAttr(o.fd)}
}

// attr returns o's attributes as of open.
func (o *obj) attr() nfs3.PostOpAttr {
	if o.fd < 0 {
		return nfs3.PostOpAttr{}
	}
	return nfs3.Attrs(fattr(&o.st))
}
