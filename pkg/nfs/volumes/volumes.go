package volumes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// maxVolumePath bounds a volume path, in bytes (MNTPATHLEN, RFC 1813
// section 5.1.4, less the leading "/").
const maxVolumePath = 1023

// Volume is a registered volume: a directory under the root exported as
// "/"+path to the nodes granted access, with a quota.
//
// Usage is kept in bytes allocated (st_blocks*512, hard links counted
// once) and inodes, per inode: counted by walking the tree at
// registration, at start and by Rescan, then set by every modifying NFS
// call made through the volume's export for the inodes it touches (see
// quota.go).
type Volume struct {
	r    *Registry
	path string // relative to the root, cleaned ("pvc-1", "ns/pvc-1")

	// guarded by Registry.mu
	dir    *dirID // its directory; nil when it is missing
	access []admin.Access
	meta   map[string]string

	quota    atomic.Int64             // bytes; 0: unlimited
	used     atomic.Int64             // bytes allocated: the sum of acct's records
	inodes   atomic.Int64             // the number of acct's records
	reserved atomic.Int64             // bytes reserved by calls in progress (quota.go)
	slack    atomic.Int64             // bytes writeback may still allocate to dirty inodes (quota.go)
	acct     acct                     // per-inode usage (quota.go)
	reg      atomic.Pointer[Registry] // set by the first recount, before the volume is exported
}

// dirID identifies a volume's directory (st_dev, st_ino), to tell when it
// was replaced.
type dirID struct{ dev, ino uint64 }

// exportLocked returns the volume's export with its client list, Missing
// when its directory could not be resolved. Registry.mu is held.
func (v *Volume) exportLocked() Export {
	if v.dir == nil {
		return Export{Path: "/" + v.path, Missing: true}
	}
	ex := Export{Path: "/" + v.path, Dev: v.dir.dev, Ino: v.dir.ino, Volume: v}
	for _, a := range v.access {
		switch {
		case a.Name == "":
		case a.ReadOnly:
			ex.ReadOnlyNodes = append(ex.ReadOnlyNodes, a.Name)
		default:
			ex.Nodes = append(ex.Nodes, a.Name)
		}
		for _, s := range a.Addrs {
			p, err := ParsePrefix(s)
			if err != nil {
				continue // checked by Grant
			}
			if a.ReadOnly {
				ex.ReadOnlyClients = append(ex.ReadOnlyClients, p.Masked())
			} else {
				ex.Clients = append(ex.Clients, p.Masked())
			}
		}
	}
	return ex
}

// info returns the volume as the admin API shows it. Registry.mu is held.
func (v *Volume) info() admin.Volume {
	acc := make([]admin.Access, len(v.access))
	for i, a := range v.access {
		a.Addrs = slices.Clone(a.Addrs)
		acc[i] = a
	}
	return admin.Volume{
		Path:       v.path,
		QuotaBytes: v.quota.Load(),
		UsedBytes:  max(0, v.used.Load()),
		UsedInodes: max(0, v.inodes.Load()),
		Access:     acc,
		Meta:       maps.Clone(v.meta),
	}
}

// checkMeta checks volume metadata against the admin.MaxMeta* limits.
func checkMeta(m map[string]string) error {
	if len(m) > admin.MaxMetaEntries {
		return fmt.Errorf("%w: %d metadata entries, at most %d", admin.ErrInvalid, len(m), admin.MaxMetaEntries)
	}
	for k, v := range m {
		if k == "" || len(k) > admin.MaxMetaKey || len(v) > admin.MaxMetaValue {
			return fmt.Errorf("%w: metadata %q: keys of 1 to %d bytes, values of at most %d", admin.ErrInvalid, k, admin.MaxMetaKey, admin.MaxMetaValue)
		}
	}
	return nil
}

func (r *Registry) sortedVolumes() []*Volume {
	out := make([]*Volume, 0, len(r.vols))
	for _, v := range r.vols {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *Volume) int { return cmp.Compare(a.path, b.path) })
	return out
}

// volumePath checks and normalises a volume path: relative to the root
// (one leading "/" is dropped), clean, not the root itself, no ".." and
// no NUL byte; ErrInvalid otherwise.
func volumePath(p string) (string, error) {
	q := strings.TrimPrefix(p, "/")
	switch {
	case q == "" || q == ".":
		return "", fmt.Errorf("%w: volume path %q: the root itself is not a volume", admin.ErrInvalid, p)
	case len(q) > maxVolumePath:
		return "", fmt.Errorf("%w: volume path of %d bytes, at most %d", admin.ErrInvalid, len(q), maxVolumePath)
	case strings.IndexByte(q, 0) >= 0 || path.Clean(q) != q || q == ".." || strings.HasPrefix(q, "../"):
		return "", fmt.Errorf("%w: volume path %q: want a clean relative path without \"..\"", admin.ErrInvalid, p)
	}
	return q, nil
}

// within reports whether a equals b or lies beneath it (both cleaned,
// relative).
func within(a, b string) bool { return a == b || strings.HasPrefix(a, b+"/") }

// Overlaps reports whether paths a and b (cleaned, relative to the root,
// as volume paths are) are equal or one lies beneath the other.
func Overlaps(a, b string) bool { return within(a, b) || within(b, a) }

// conflictLocked checks that a volume at p neither equals, contains nor
// lies inside another volume (other than p itself) or a static export
// other than "/". Registry.mu is held.
func (r *Registry) conflictLocked(p string) error {
	for q := range r.vols {
		if q != p && Overlaps(p, q) {
			return fmt.Errorf("%w: volume %q overlaps volume %q", admin.ErrPrecondition, p, q)
		}
	}
	if r.exp != nil {
		if err := r.exp.StaticOverlap(p); err != nil {
			return fmt.Errorf("%w: volume %q: %w", admin.ErrPrecondition, p, err)
		}
	}
	return nil
}

// resolveVolume finds volume directory p: a directory beneath the root
// reached without symlinks, on the root's file system; ErrPrecondition
// when there is none.
func (r *Registry) resolveVolume(p string) (*dirID, error) {
	d, err := openDirBeneath(r.rootFD, p)
	if err == nil {
		var st unix.Stat_t
		err = unix.Fstat(int(d.Fd()), &st)
		d.Close()
		if err == nil {
			return &dirID{dev: st.Dev, ino: st.Ino}, nil
		}
	}
	var en unix.Errno
	if errors.As(err, &en) {
		switch en {
		case unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EXDEV:
			return nil, fmt.Errorf("%w: volume directory %q: %w", admin.ErrPrecondition, p, err)
		}
	}
	return nil, fmt.Errorf("volumes: volume directory %q: %w", p, err)
}

// AddVolume registers the existing directory p (relative to the root, see
// admin.Volume.Path) as the export "/"+p with quotaBytes (0: unlimited)
// and metadata meta, counting its usage by walking it; or, when p is
// registered, sets its quota (lowering it below the usage is allowed:
// further growth fails) and its metadata (nil keeps it) and, if its
// directory was replaced, resolves it and counts again. A new volume
// allows no client until Grant. Errors wrap admin.ErrInvalid (bad path,
// negative quota, metadata over the limits), admin.ErrPrecondition (no
// such directory, or it overlaps another volume or a static export), or
// are internal (walk or state file failures).
func (r *Registry) AddVolume(p string, quotaBytes int64, meta map[string]string) (admin.Volume, error) {
	p, err := volumePath(p)
	if err != nil {
		return admin.Volume{}, err
	}
	if quotaBytes < 0 {
		return admin.Volume{}, fmt.Errorf("%w: negative quota %d", admin.ErrInvalid, quotaBytes)
	}
	if err := checkMeta(meta); err != nil {
		return admin.Volume{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.conflictLocked(p); err != nil {
		return admin.Volume{}, err
	}
	ex, err := r.resolveVolume(p)
	if err != nil {
		return admin.Volume{}, err
	}
	v := r.vols[p]
	if v != nil {
		oldQuota, oldEx, oldMeta := v.quota.Load(), v.dir, v.meta
		if v.dir == nil || *v.dir != *ex {
			if err := r.recount(v, p); err != nil {
				return admin.Volume{}, err
			}
			v.dir = ex
			if err := r.publishLocked(); err != nil {
				v.dir = oldEx
				return admin.Volume{}, fmt.Errorf("%w: %w", admin.ErrPrecondition, err)
			}
		}
		v.quota.Store(quotaBytes)
		if meta != nil {
			v.meta = maps.Clone(meta)
		}
		if err := r.saveLocked(); err != nil {
			v.quota.Store(oldQuota)
			v.meta = oldMeta
			return admin.Volume{}, err
		}
		if oldQuota != quotaBytes {
			klog.InfoS("volumes: volume quota set", "volume", p, "quotaBytes", quotaBytes, "usedBytes", v.used.Load())
		}
		return v.info(), nil
	}
	v = &Volume{r: r, path: p, dir: ex, meta: maps.Clone(meta)}
	v.quota.Store(quotaBytes)
	if err := r.recount(v, p); err != nil {
		return admin.Volume{}, err
	}
	r.vols[p] = v
	if err := r.publishLocked(); err != nil {
		delete(r.vols, p)
		return admin.Volume{}, fmt.Errorf("%w: %w", admin.ErrPrecondition, err)
	}
	if err := r.saveLocked(); err != nil {
		delete(r.vols, p)
		r.publishLocked()
		return admin.Volume{}, err
	}
	klog.InfoS("volumes: volume registered", "volume", p, "export", "/"+p,
		"quotaBytes", quotaBytes, "usedBytes", v.used.Load(), "usedInodes", v.inodes.Load())
	return v.info(), nil
}

// recount sets v's usage from a walk of directory p (volume.rescan: calls
// running meanwhile are accounted for exactly).
func (r *Registry) recount(v *Volume, p string) error {
	v.reg.CompareAndSwap(nil, r)
	if err := v.rescan(context.Background(), r.rootFD, p); err != nil {
		return fmt.Errorf("volumes: volume %q: counting usage: %w", p, err)
	}
	return nil
}

// Rescan counts the usage of registered volume p again from a walk of its
// tree, while NFS calls go on, and returns the volume: it takes in what
// was changed outside the volume's export (local processes, the root
// export) and blocks that writeback allocated since the last call
// touching a file; see quota.go for what a rescan during renames keeps.
// Nothing in the registry calls it (there is no periodic rescan): until
// it is called, or the registry restarts (New counts every volume again), such
// changes stay uncounted unless a call through the volume touches the
// inode. It takes time proportional to the number of files and ends early
// with ctx's error. Errors wrap admin.ErrNotFound (not registered),
// admin.ErrPrecondition (its directory is missing), admin.ErrInvalid (bad
// path), or are internal (walk failures).
func (r *Registry) Rescan(ctx context.Context, p string) (admin.Volume, error) {
	p, err := volumePath(p)
	if err != nil {
		return admin.Volume{}, err
	}
	r.mu.Lock()
	v := r.vols[p]
	bound := v != nil && v.reg.Load() != nil
	r.mu.Unlock()
	if v == nil {
		return admin.Volume{}, fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, p)
	}
	if !bound {
		return admin.Volume{}, fmt.Errorf("%w: volume %q: its directory was not found", admin.ErrPrecondition, p)
	}
	if err := v.rescan(ctx, r.rootFD, p); err != nil {
		return admin.Volume{}, fmt.Errorf("volumes: volume %q: counting usage: %w", p, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return v.info(), nil
}

// RemoveVolume unregisters volume p: its export disappears (handles of it
// become NFS3ERR_BADHANDLE), a clone job filling it is cancelled (and
// waited for); the directory is left as it is. Idempotent: nil when p is
// not registered. Errors wrap admin.ErrInvalid for a bad path, or are
// internal (state file).
func (r *Registry) RemoveVolume(p string) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	r.mu.Lock()
	v := r.vols[p]
	cl := r.clones[p]
	if v == nil && cl == nil {
		r.mu.Unlock()
		return nil
	}
	delete(r.vols, p)
	delete(r.clones, p)
	err = r.publishLocked()
	if err == nil {
		err = r.saveLocked()
	}
	if err != nil {
		if v != nil {
			r.vols[p] = v
		}
		if cl != nil {
			r.clones[p] = cl
		}
		r.publishLocked()
		r.mu.Unlock()
		return err
	}
	r.mu.Unlock()
	if cl != nil {
		cl.job.cancelAndWait()
	}
	klog.InfoS("volumes: volume unregistered", "volume", p)
	return nil
}

// Volume returns registered volume p, its usage taken after a fresh stat
// of its files with unsynced data (blocks writeback allocated since their
// last call are counted); admin.ErrNotFound when it is not registered,
// admin.ErrInvalid for a bad path.
func (r *Registry) Volume(p string) (admin.Volume, error) {
	p, err := volumePath(p)
	if err != nil {
		return admin.Volume{}, err
	}
	r.mu.Lock()
	v := r.vols[p]
	r.mu.Unlock()
	if v == nil {
		return admin.Volume{}, fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, p)
	}
	v.refreshDirty()
	r.mu.Lock()
	defer r.mu.Unlock()
	return v.info(), nil
}

// Volumes returns every registered volume, sorted by path.
func (r *Registry) Volumes() []admin.Volume {
	r.mu.Lock()
	vs := r.sortedVolumes()
	r.mu.Unlock()
	for _, v := range vs {
		v.refreshDirty()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]admin.Volume, len(vs))
	for i, v := range vs {
		out[i] = v.info()
	}
	return out
}

// checkAccess validates and normalises a grant: a node id, and at least
// one address, each an IP address or CIDR.
func checkAccess(a admin.Access) (admin.Access, error) {
	if a.Node == "" {
		return a, fmt.Errorf("%w: empty node id", admin.ErrInvalid)
	}
	if len(a.Addrs) == 0 {
		return a, fmt.Errorf("%w: node %q: no address", admin.ErrInvalid, a.Node)
	}
	if len(a.Name) > 253 || strings.ContainsFunc(a.Name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return a, fmt.Errorf("%w: node %q: name %q: want a DNS name of at most 253 bytes", admin.ErrInvalid, a.Node, a.Name)
	}
	out := admin.Access{Node: a.Node, Name: a.Name, ReadOnly: a.ReadOnly, Addrs: make([]string, 0, len(a.Addrs))}
	for _, s := range a.Addrs {
		p, err := ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return a, fmt.Errorf("%w: node %q: address %q: %w", admin.ErrInvalid, a.Node, s, err)
		}
		addr, bits := p.Addr(), p.Bits()
		if addr.Is4In6() {
			if bits < 96 {
				return a, fmt.Errorf("%w: node %q: address %q: an IPv4-mapped prefix shorter than /96", admin.ErrInvalid, a.Node, s)
			}
			addr, bits = addr.Unmap(), bits-96
		}
		p = netip.PrefixFrom(addr, bits).Masked()
		if p.IsSingleIP() {
			out.Addrs = append(out.Addrs, p.Addr().String())
		} else {
			out.Addrs = append(out.Addrs, p.String())
		}
	}
	slices.Sort(out.Addrs)
	out.Addrs = slices.Compact(out.Addrs)
	return out, nil
}

// Grant adds a.Node's entry to volume p's client list or replaces it;
// from the next NFS call, calls from a.Addrs may use the volume
// (read-only with a.ReadOnly). Idempotent. Errors wrap admin.ErrNotFound
// (not registered), admin.ErrInvalid (bad path, node or address), or are
// internal (state file).
func (r *Registry) Grant(p string, a admin.Access) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	a, err = checkAccess(a)
	if err != nil {
		return err
	}
	return r.changeAccess(p, func(acc []admin.Access) []admin.Access {
		i, found := slices.BinarySearchFunc(acc, a.Node, func(x admin.Access, n string) int { return cmp.Compare(x.Node, n) })
		if found {
			acc[i] = a
			return acc
		}
		return slices.Insert(acc, i, a)
	}, "grant", a)
}

// Revoke removes node's entry from volume p's client list: from the next
// NFS call, calls from its addresses are refused (NFS3ERR_ACCES,
// MNT3ERR_ACCES) unless another node's entry covers them. Idempotent.
// Errors wrap admin.ErrNotFound (not registered), admin.ErrInvalid (bad
// path), or are internal (state file).
func (r *Registry) Revoke(p, node string) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	return r.changeAccess(p, func(acc []admin.Access) []admin.Access {
		return slices.DeleteFunc(acc, func(x admin.Access) bool { return x.Node == node })
	}, "revoke", admin.Access{Node: node})
}

func (r *Registry) changeAccess(p string, f func([]admin.Access) []admin.Access, what string, a admin.Access) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.vols[p]
	if v == nil {
		return fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, p)
	}
	old := v.access
	v.access = f(slices.Clone(old))
	err := r.publishLocked()
	if err == nil {
		err = r.saveLocked()
	}
	if err != nil {
		v.access = old
		r.publishLocked()
		return err
	}
	klog.InfoS("volumes: volume access "+what, "volume", p, "node", a.Node, "addrs", a.Addrs, "readOnly", a.ReadOnly, "nodes", len(v.access))
	return nil
}
