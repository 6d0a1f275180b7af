package fusefs

import (
	"syscall"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// MaxDirNames bounds the names kept per directory whose whole listing is
// known (dirNames): a directory that grows past it is forgotten, and
// LOOKUPs of its unknown names go to the server again.
const MaxDirNames = 1 << 16

// dirNames is the whole listing of a directory this mount made (MKDIR: it
// starts empty), kept while every change of the directory came through
// this mount. Each change's reply carries the directory's attributes
// before and after it (wcc_data, RFC 1813 section 2.6): the set follows a
// change only when the attributes before it are those the set is for, and
// is forgotten otherwise (another client, a change the mount did not
// note, an error).
//
// It answers the LOOKUP of a name it lacks with ENOENT without an NFS
// LOOKUP while the directory's cached attributes are fresh and are those
// the set is for: the trust Linux gives a negative dentry, valid while
// the directory's cached attributes are (nfs_neg_need_reval), under the
// same weak cache consistency (a change by another client shows once the
// directory's attribute timeout has passed). Its use: the LOOKUP the
// kernel sends before every O_CREAT|O_EXCL open, which Linux's own NFS
// client skips (nfs_is_exclusive_create) but a FUSE file system cannot
// tell from another LOOKUP; in a directory made by this mount (an
// unpacked archive, a build tree), creating a file costs one NFS CREATE,
// not a LOOKUP and a CREATE.
type dirNames struct {
	names map[string]struct{}
	ver   dirVersion // the directory's attributes the set is for
}

// dirVersion is what tells one state of a directory from another in NFSv3
// attributes: size, mtime and ctime (as wcc_attr).
type dirVersion struct {
	size         uint64
	mtime, ctime nfs3.Time
}

func versionOf(a *nfs3.Fattr) dirVersion {
	return dirVersion{size: a.Size, mtime: a.Mtime, ctime: a.Ctime}
}

func versionBefore(w *nfs3.WccAttr) dirVersion {
	return dirVersion{size: w.Size, mtime: w.Mtime, ctime: w.Ctime}
}

// setNamesLocked makes d's known names s (nil: none), keeping
// MemoryStats.DirEntries. Called with n.mu held.
func (n *node) setNamesLocked(s *dirNames) {
	var d int
	if n.names != nil {
		d -= len(n.names.names)
	}
	if s != nil {
		d += len(s.names)
	}
	n.sys.dirEntries.Add(int64(d))
	n.names = s
}

// madeEmpty records that directory n was just made by MKDIR with
// attributes a: its listing is known, empty.
func (n *node) madeEmpty(a *nfs3.Fattr) {
	n.mu.Lock()
	n.setNamesLocked(&dirNames{names: map[string]struct{}{}, ver: versionOf(a)})
	n.mu.Unlock()
}

// followLocked applies to n's known names a change made through this
// mount: wcc from its reply, add and del the names it added and removed
// ("" for none; del first). Called with n.mu held.
func (n *node) followLocked(wcc *nfs3.WccData, add, del string) {
	s := n.names
	if s == nil {
		return
	}
	if !wcc.Before.Set || !wcc.After.Set || versionBefore(&wcc.Before.Attr) != s.ver {
		n.setNamesLocked(nil) // changed by someone else too, or unknown
		return
	}
	if del != "" {
		if _, ok := s.names[del]; ok {
			delete(s.names, del)
			n.sys.dirEntries.Add(-1)
		}
	}
	if add != "" {
		if _, ok := s.names[add]; !ok {
			if len(s.names) >= MaxDirNames {
				n.setNamesLocked(nil)
				return
			}
			s.names[add] = struct{}{}
			n.sys.dirEntries.Add(1)
		}
	}
	s.ver = versionOf(&wcc.After.Attr)
}

// forgetNames drops n's known names.
func (n *node) forgetNames() {
	n.mu.Lock()
	n.setNamesLocked(nil)
	n.mu.Unlock()
}

// changeFailed is the errno of a failed change of directory n, whose
// known names it drops: the set may be wrong (EEXIST for a name it
// lacked, ENOENT for one it had), or n may have changed unnoted.
func (n *node) changeFailed(err error) syscall.Errno {
	n.forgetNames()
	return toErrno(err)
}

// absentLocked reports whether name is known not to be in directory n at
// now: n's listing is known, lacks name, and is for n's cached attributes,
// which are fresh. A set for other attributes than the cached ones is
// dropped. Called with n.mu held.
func (n *node) absentLocked(name string, now time.Time) bool {
	s := n.names
	if s == nil || !n.ac.valid {
		return false
	}
	if versionOf(&n.ac.attr) != s.ver {
		n.setNamesLocked(nil)
		return false
	}
	if now.Sub(n.ac.at) >= n.ac.timeo {
		return false // stale: a LOOKUP refreshes the attributes
	}
	_, ok := s.names[name]
	return !ok
}
