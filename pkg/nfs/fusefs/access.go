package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// MaxAccessCreds bounds the credentials whose ACCESS answers one inode
// keeps: past it, the least recently used answer is dropped.
const MaxAccessCreds = 16

// Permissions a check asks for, the kernel's MAY_READ, MAY_WRITE and
// MAY_EXEC (and access(2)'s R_OK, W_OK and X_OK).
const (
	mayExec  = 1
	mayWrite = 2
	mayRead  = 4
)

// fmodeExec is the kernel's __FMODE_EXEC in the flags of a FUSE OPEN: the
// file is opened to be executed (execve, uselib).
const fmodeExec = 0x20

// accessEntry is the server's ACCESS answer (RFC 1813 section 3.3.4) on an
// inode for one credential, as an entry of Linux's access cache
// (nfs_access_entry).
type accessEntry struct {
	key  string      // the credential (credKey)
	bits uint32      // the ACCESS bits granted, of those accessAsk asks
	perm permVersion // the attributes it answered for
	at   time.Time   // when it was answered
}

// permVersion is what of an inode's attributes the permission checks
// depend on: mode, owner and group. A change of any of them (chmod, chown,
// chgrp, by this mount or another client) makes the inode's cached
// answers stale once the mount sees the new attributes, as
// nfs_access_zap_cache when Linux NFS sees a new mode, uid or gid.
type permVersion struct{ mode, uid, gid uint32 }

func permOf(a *nfs3.Fattr) permVersion {
	return permVersion{mode: a.Mode, uid: a.UID, gid: a.GID}
}

type callerKeyT struct{}

// withCaller returns ctx carrying the credential key of the FUSE caller
// the NFS calls of ctx are made for (fsys.call).
func withCaller(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, callerKeyT{}, key)
}

// callerKey returns the key withCaller put in ctx; "" is the mount's own
// credential (calls made for no FUSE caller).
func callerKey(ctx context.Context) string {
	k, _ := ctx.Value(callerKeyT{}).(string)
	return k
}

// accessAsk is the ACCESS mask asked for an inode: every bit that means
// something for its type, so that one answer serves every later check of
// that credential (as nfs_do_access asks).
func accessAsk(isDir bool) uint32 {
	if isDir {
		return nfs3.AccessRead | nfs3.AccessLookup | nfs3.AccessModify | nfs3.AccessExtend | nfs3.AccessDelete
	}
	return nfs3.AccessRead | nfs3.AccessModify | nfs3.AccessExtend | nfs3.AccessExecute
}

// allowed returns the permissions (mayRead | mayWrite | mayExec) that the
// ACCESS bits granted give: read with READ; write with MODIFY and EXTEND
// (and DELETE for a directory); execute with EXECUTE, or LOOKUP (search)
// for a directory.
func allowed(bits uint32, isDir bool) uint32 {
	var may uint32
	if bits&nfs3.AccessRead != 0 {
		may |= mayRead
	}
	w := uint32(nfs3.AccessModify | nfs3.AccessExtend)
	x := uint32(nfs3.AccessExecute)
	if isDir {
		w |= nfs3.AccessDelete
		x = nfs3.AccessLookup
	}
	if bits&w == w {
		may |= mayWrite
	}
	if bits&x != 0 {
		may |= mayExec
	}
	return may
}

func (n *node) isDir() bool {
	return n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR
}

// permit checks that the caller of ctx (callerKey) has the permissions may
// (mayRead | mayWrite | mayExec) on n: from n's access cache when its
// answer for that credential is fresh, else with an NFS ACCESS, whose
// answer it caches. EACCES when the server does not grant them; the
// ACCESS call's errors otherwise. As Linux's nfs_do_access: the server
// decides (root squash, ACLs and all), and an answer ages with the
// inode's attribute cache (accessLocked).
func (n *node) permit(ctx context.Context, may uint32) syscall.Errno {
	if may == 0 {
		return 0
	}
	isDir := n.isDir()
	key := callerKey(ctx)
	n.mu.Lock()
	bits, ok := n.accessLocked(key, time.Now())
	n.mu.Unlock()
	if !ok {
		res, err := n.sys.c.Access(ctx, n.fh, accessAsk(isDir))
		if err != nil {
			return toErrno(err)
		}
		bits = res.Access
		n.mu.Lock()
		n.answeredLocked(key, bits, &res.Attr)
		n.mu.Unlock()
	}
	if may&^allowed(bits, isDir) != 0 {
		return syscall.EACCES
	}
	return 0
}

// accessLocked returns the cached ACCESS bits of credential key on n at
// now, if fresh: n's cached attributes are fresh (younger than their
// timeout; never with noac) and show the mode, owner and group the answer
// was given for, as Linux's access cache lives while the inode's
// attributes are valid and unchanged (nfs_access_get_cached); and, so
// that a change the attributes do not show (an ACL) is seen too, the
// answer is younger than the longest attribute timeout (acregmax or
// acdirmax). The entry becomes the most recently used. Called with n.mu
// held.
func (n *node) accessLocked(key string, now time.Time) (uint32, bool) {
	if !n.ac.valid || now.Sub(n.ac.at) >= n.ac.timeo {
		return 0, false
	}
	_, hi := n.timeouts(n.ac.attr.Type == nfs3.TypeDir)
	for i, e := range n.acc {
		if e.key != key {
			continue
		}
		if e.perm != permOf(&n.ac.attr) || now.Sub(e.at) >= hi {
			return 0, false
		}
		if i != len(n.acc)-1 {
			n.acc = append(append(n.acc[:i:i], n.acc[i+1:]...), e)
		}
		return e.bits, true
	}
	return 0, false
}

// answeredLocked records an ACCESS answer (bits granted to key, the
// reply's post-op attributes attr) in n's access cache, at most
// MaxAccessCreds entries. The attributes refresh n's attribute cache; if
// they say the file's data changed since n's cached attributes, those are
// marked unknown instead, so that the next open drops the kernel's pages
// (Open, refresh). Called with n.mu held.
func (n *node) answeredLocked(key string, bits uint32, attr *nfs3.PostOpAttr) {
	var perm permVersion
	switch {
	case attr.Set:
		a := &attr.Attr
		if n.ac.valid && a.Type != nfs3.TypeDir &&
			(a.Mtime != n.ac.attr.Mtime || a.Size != n.ac.attr.Size || a.Ctime != n.ac.attr.Ctime) {
			n.ac.valid = false
		} else {
			n.refreshLocked(a)
		}
		perm = permOf(a)
	case n.ac.valid:
		perm = permOf(&n.ac.attr)
	default:
		return // not known what it answered for
	}
	e := accessEntry{key: key, bits: bits, perm: perm, at: time.Now()}
	was := len(n.acc)
	for i := range n.acc {
		if n.acc[i].key == key {
			n.acc = append(n.acc[:i], n.acc[i+1:]...)
			break
		}
	}
	if len(n.acc) >= MaxAccessCreds {
		n.acc = append(n.acc[:0], n.acc[1:]...)
	}
	n.acc = append(n.acc, e)
	n.sys.accessEntries.Add(int64(len(n.acc) - was))
}

// dropAccessLocked empties n's access cache (the node is forgotten).
// Called with n.mu held.
func (n *node) dropAccessLocked() {
	n.sys.accessEntries.Add(-int64(len(n.acc)))
	n.acc = nil
}

// searchable reports whether every user may search directory n (execute
// permission for owner, group and others in its cached mode): only then
// may the kernel keep the names in n (entry timeout), since it walks a
// cached name without asking us. The kernel checks the caller's search
// permission on every walk from the mode bits (default_permissions); the
// names in other directories get entry timeout 0 so that every path walk
// through them also comes to Lookup, which asks the server (permit: what
// it refuses beyond the mode bits, as root squash, is refused), answered
// without an NFS call while the name and the permission are fresh in our
// caches. Called with n.mu held.
func (n *node) searchableLocked() bool {
	return n.ac.valid && n.ac.attr.Mode&0o111 == 0o111
}

// unsearchable drops the kernel's cached names in directory n, which is no
// longer searchable by all (refreshLocked): they were given an entry
// timeout (searchableLocked), and the kernel would walk them without
// asking us until it ran out (checking only the mode bits); now each walk
// comes to Lookup, which asks the server too. In its own goroutine, after
// the request that saw the new mode: the kernel invalidates a name with
// the directory locked, and a chmod holds that lock until its SETATTR is
// answered.
func (n *node) unsearchable() {
	for name := range n.Children() {
		if errno := n.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
			klog.V(2).InfoS("fusefs: dropping the kernel's names of a directory no longer searchable by all", "fh", n.fh.String(), "name", name, "err", errno)
		}
	}
}

// entry is where and when Lookup last told the kernel about a node: its
// parent, name and the time, valid for timeo (the parent's attribute
// timeout then), even if the kernel was given entry timeout 0.
type entry struct {
	parent *node
	name   string
	at     time.Time
	timeo  time.Duration
}

// knownChild answers a LOOKUP of name in n from the node the kernel
// already has for it, without an NFS call, when that node was looked up
// (or made) as name in n less than n's attribute timeout ago and its own
// attributes are fresh: what the kernel's dentry and attribute caches
// would have answered had n's names had an entry timeout (searchable).
func (n *node) knownChild(name string, now time.Time, out *fuse.EntryOut) *fs.Inode {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	cn, ok := ch.Operations().(*node)
	if !ok || cn == n {
		return nil
	}
	cn.mu.Lock()
	e := cn.seen
	fresh := e.parent == n && e.name == name && now.Sub(e.at) < e.timeo &&
		cn.ac.valid && now.Sub(cn.ac.at) < cn.ac.timeo
	if fresh {
		fillAttr(&out.Attr, &cn.ac.attr, n.sys.blksize)
		out.SetAttrTimeout(cn.ac.timeo - now.Sub(cn.ac.at))
	}
	cn.mu.Unlock()
	if !fresh {
		return nil
	}
	n.mu.Lock()
	search := n.searchableLocked()
	n.mu.Unlock()
	if search {
		out.SetEntryTimeout(e.timeo - now.Sub(e.at))
	} else {
		out.SetEntryTimeout(0)
	}
	return ch
}

// childEntry records that the kernel is told about cn as name in n now
// (node.seen) and returns the entry timeout to give: n's attribute
// timeout, or 0 unless n is searchable by all (searchableLocked).
func (n *node) childEntry(cn *node, name string) time.Duration {
	n.mu.Lock()
	timeo := n.ac.timeo
	if !n.ac.valid {
		timeo, _ = n.sys.o.DirTimeouts()
	}
	search := n.searchableLocked()
	n.mu.Unlock()
	cn.mu.Lock()
	cn.seen = entry{parent: n, name: name, at: time.Now(), timeo: timeo}
	cn.mu.Unlock()
	if !search {
		return 0
	}
	return timeo
}
