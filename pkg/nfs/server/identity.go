package server

import (
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// nobody is the uid and gid of AUTH_NONE callers and of squashed root.
const nobody = 65534

// identity is the caller's AUTH_SYS identity after squashing.
type identity struct {
	uid, gid uint32
	groups   []uint32 // aliases the request, unless squashed
}

// setIdentity computes the caller's identity under export ex.
func (c *call) setIdentity(ex *export) {
	cr := &c.req.Cred
	if cr.Flavor != sunrpc.AuthSys {
		c.id = identity{uid: nobody, gid: nobody}
		return
	}
	c.id = identity{uid: cr.Sys.UID, gid: cr.Sys.GID, groups: cr.Sys.GIDs}
	if ex.RootSquash {
		if c.id.uid == 0 {
			c.id.uid = nobody
		}
		if c.id.gid == 0 {
			c.id.gid = nobody
		}
		// group 0 among the supplementary groups too, as knfsd does
		if slices.Contains(c.id.groups, 0) {
			g := slices.Clone(c.id.groups)
			for i := range g {
				if g[i] == 0 {
					g[i] = nobody
				}
			}
			c.id.groups = g
		}
	}
}

func (id *identity) inGroup(g uint32) bool {
	if id.gid == g {
		return true
	}
	for _, x := range id.groups {
		if x == g {
			return true
		}
	}
	return false
}

// Permission bits for may.
const (
	mayExec  = 1
	mayWrite = 2
	mayRead  = 4
)

// may reports whether id may access an object with stat st for mask (a
// combination of mayRead, mayWrite, mayExec), as the kernel's
// generic_permission without ACLs: uid 0 may do anything except execute a
// non-directory with no execute bit.
func (id *identity) may(st *unix.Stat_t, mask uint32) bool {
	if id.uid == 0 {
		if mask&mayExec != 0 && st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&0o111 == 0 {
			return false
		}
		return true
	}
	m := st.Mode
	switch {
	case st.Uid == id.uid:
		m >>= 6
	case id.inGroup(st.Gid):
		m >>= 3
	}
	return m&mask == mask
}

// mayChown is NFS3ERR_PERM unless id may set the owner and group of an
// object with stat st as sa asks, as the kernel's chown_ok and chgrp_ok
// for a caller without CAP_CHOWN: uid 0 may set any; the owner may set
// the owner only to itself, and the group to the current one or one of
// its groups; anyone else may set neither, not even to the current ids.
func (id *identity) mayChown(st *unix.Stat_t, sa *nfs3.Sattr) nfs3.Status {
	if id.uid == 0 {
		return nfs3.OK
	}
	if id.uid != st.Uid {
		return nfs3.ErrPerm
	}
	if sa.SetUID && sa.UID != st.Uid {
		return nfs3.ErrPerm
	}
	if sa.SetGID && sa.GID != st.Gid && !id.inGroup(sa.GID) {
		return nfs3.ErrPerm
	}
	return nfs3.OK
}

// chmodMode returns the permission bits (07777) that setting mode on an
// object with stat st leaves for id, as the kernel's setattr_prepare for
// a caller without CAP_FSETID: S_ISGID is dropped on a non-directory
// whose group id is not in.
func (id *identity) chmodMode(st *unix.Stat_t, mode uint32) uint32 {
	mode &= 0o7777
	if id.uid != 0 && !id.inGroup(st.Gid) && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		mode &^= unix.S_ISGID
	}
	return mode
}

// setIDAfterWrite returns the mode a regular file with stat st keeps after
// id writes to it or sets its size, as the kernel's file_remove_privs and
// do_truncate (setattr_should_drop_suidgid) leave it for a caller without
// CAP_FSETID:
// S_ISUID is cleared; S_ISGID is cleared when group execute is set or id is
// not in the file's group (S_ISGID without group execute is otherwise a
// mandatory-locking mark, kept). The server writes as root, so it applies
// this itself; uid 0 (after squashing) keeps both bits. The result is the
// mode's permission bits (07777) and whether it differs from st's.
func (id *identity) setIDAfterWrite(st *unix.Stat_t) (uint32, bool) {
	mode := st.Mode & 0o7777
	if id.uid == 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return mode, false
	}
	kill := mode & unix.S_ISUID
	if mode&unix.S_ISGID != 0 && (mode&unix.S_IXGRP != 0 || !id.inGroup(st.Gid)) {
		kill |= unix.S_ISGID
	}
	return mode &^ kill, kill != 0
}
