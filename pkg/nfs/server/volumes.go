package server

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

// volume is a registered volume: a directory under the root exported as
// "/"+path to the nodes granted access, with a quota.
//
// Usage is kept in bytes allocated (st_blocks*512, hard links counted
// once) and inodes, per inode: counted by walking the tree at
// registration, at start and by Rescan, then set by every modifying NFS
// call made through the volume's export for the inodes it touches (see
// quota.go).
type volume struct {
	path string // relative to the root, cleaned ("pvc-1", "ns/pvc-1")

	// guarded by Server.tmu
	ex     *export // resolved export (clients not set); nil when its directory is missing
	access []admin.Access
	meta   map[string]string

	quota    atomic.Int64           // bytes; 0: unlimited
	used     atomic.Int64           // bytes allocated: the sum of acct's records
	inodes   atomic.Int64           // the number of acct's records
	reserved atomic.Int64           // bytes reserved by calls in progress (quota.go)
	slack    atomic.Int64           // bytes writeback may still allocate to dirty inodes (quota.go)
	acct     acct                   // per-inode usage (quota.go)
	srv      atomic.Pointer[Server] // set by the first recount, before the volume is exported
}

// exportLocked returns the volume's export with its client list, or nil
// when its directory could not be resolved. Server.tmu is held.
func (v *volume) exportLocked() *export {
	if v.ex == nil {
		return nil
	}
	ex := *v.ex
	ex.Clients, ex.ReadOnlyClients = nil, nil
	ex.ExplicitClients = true
	ex.vol = v
	for _, a := range v.access {
		for _, s := range a.Addrs {
			p, err := parsePrefix(s)
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
	return &ex
}

// info returns the volume as the admin API shows it. Server.tmu is held.
func (v *volume) info() admin.Volume {
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

// registry is the server's volumes, snapshots and clones, guarded by
// Server.tmu.
type registry struct {
	vols      map[string]*volume
	snaps     map[string]*snapRec
	clones    map[string]*cloneRec
	stateFile string // "": not persisted
	snapDir   string // "": no snapshots
}

func (r *registry) sortedVolumes() []*volume {
	out := make([]*volume, 0, len(r.vols))
	for _, v := range r.vols {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *volume) int { return cmp.Compare(a.path, b.path) })
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

// conflictLocked checks that a volume at p neither equals, contains nor
// lies inside another volume (other than p itself) or a static export
// other than "/". Server.tmu is held.
func (s *Server) conflictLocked(p string) error {
	for q := range s.reg.vols {
		if q != p && (within(p, q) || within(q, p)) {
			return fmt.Errorf("%w: volume %q overlaps volume %q", admin.ErrPrecondition, p, q)
		}
	}
	for _, e := range s.static {
		q := strings.TrimPrefix(e.Path, "/")
		if q != "" && (within(p, q) || within(q, p)) {
			return fmt.Errorf("%w: volume %q overlaps the static export %q", admin.ErrPrecondition, p, e.Path)
		}
	}
	return nil
}

// resolveVolume resolves the export of volume directory p: a directory
// beneath the root reached without symlinks, on the root's file system;
// ErrPrecondition when there is none.
func (s *Server) resolveVolume(p string) (*export, error) {
	ex, err := resolveExport(s.rootFD, s.seal, Export{Path: "/" + p, ExplicitClients: true})
	if err != nil {
		var en unix.Errno
		if errors.As(err, &en) {
			switch en {
			case unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EXDEV:
				return nil, fmt.Errorf("%w: volume directory %q: %w", admin.ErrPrecondition, p, err)
			}
		}
		return nil, err
	}
	return ex, nil
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
func (s *Server) AddVolume(p string, quotaBytes int64, meta map[string]string) (admin.Volume, error) {
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
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if err := s.conflictLocked(p); err != nil {
		return admin.Volume{}, err
	}
	ex, err := s.resolveVolume(p)
	if err != nil {
		return admin.Volume{}, err
	}
	v := s.reg.vols[p]
	if v != nil {
		oldQuota, oldEx, oldMeta := v.quota.Load(), v.ex, v.meta
		if v.ex == nil || v.ex.dev != ex.dev || v.ex.ino != ex.ino {
			if err := s.recount(v, p); err != nil {
				return admin.Volume{}, err
			}
			v.ex = ex
			if err := s.rebuildLocked(); err != nil {
				v.ex = oldEx
				return admin.Volume{}, fmt.Errorf("%w: %w", admin.ErrPrecondition, err)
			}
		}
		v.quota.Store(quotaBytes)
		if meta != nil {
			v.meta = maps.Clone(meta)
		}
		if err := s.saveLocked(); err != nil {
			v.quota.Store(oldQuota)
			v.meta = oldMeta
			return admin.Volume{}, err
		}
		if oldQuota != quotaBytes {
			klog.InfoS("nfs server: volume quota set", "volume", p, "quotaBytes", quotaBytes, "usedBytes", v.used.Load())
		}
		return v.info(), nil
	}
	v = &volume{path: p, ex: ex, meta: maps.Clone(meta)}
	v.quota.Store(quotaBytes)
	if err := s.recount(v, p); err != nil {
		return admin.Volume{}, err
	}
	s.reg.vols[p] = v
	if err := s.rebuildLocked(); err != nil {
		delete(s.reg.vols, p)
		return admin.Volume{}, fmt.Errorf("%w: %w", admin.ErrPrecondition, err)
	}
	if err := s.saveLocked(); err != nil {
		delete(s.reg.vols, p)
		s.rebuildLocked()
		return admin.Volume{}, err
	}
	klog.InfoS("nfs server: volume registered", "volume", p, "export", ex.Path, "exportID", ex.id,
		"quotaBytes", quotaBytes, "usedBytes", v.used.Load(), "usedInodes", v.inodes.Load())
	return v.info(), nil
}

// recount sets v's usage from a walk of directory p (volume.rescan: calls
// running meanwhile are accounted for exactly).
func (s *Server) recount(v *volume, p string) error {
	v.srv.CompareAndSwap(nil, s)
	if err := v.rescan(context.Background(), s.rootFD, p); err != nil {
		return fmt.Errorf("nfs server: volume %q: counting usage: %w", p, err)
	}
	return nil
}

// Rescan counts the usage of registered volume p again from a walk of its
// tree, while NFS calls go on, and returns the volume: it takes in what
// was changed outside the volume's export (local processes, the root
// export) and blocks that writeback allocated since the last call
// touching a file; see quota.go for what a rescan during renames keeps.
// Nothing in the server calls it (there is no periodic rescan): until it
// is called, or the server restarts (New counts every volume again), such
// changes stay uncounted unless a call through the volume touches the
// inode. It takes time proportional to the number of files and ends early
// with ctx's error. Errors wrap admin.ErrNotFound (not registered),
// admin.ErrPrecondition (its directory is missing), admin.ErrInvalid (bad
// path), or are internal (walk failures).
func (s *Server) Rescan(ctx context.Context, p string) (admin.Volume, error) {
	p, err := volumePath(p)
	if err != nil {
		return admin.Volume{}, err
	}
	s.tmu.Lock()
	v := s.reg.vols[p]
	bound := v != nil && v.srv.Load() != nil
	s.tmu.Unlock()
	if v == nil {
		return admin.Volume{}, fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, p)
	}
	if !bound {
		return admin.Volume{}, fmt.Errorf("%w: volume %q: its directory was not found", admin.ErrPrecondition, p)
	}
	if err := v.rescan(ctx, s.rootFD, p); err != nil {
		return admin.Volume{}, fmt.Errorf("nfs server: volume %q: counting usage: %w", p, err)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	return v.info(), nil
}

// RemoveVolume unregisters volume p: its export disappears (handles of it
// become NFS3ERR_BADHANDLE), a clone job filling it is cancelled (and
// waited for); the directory is left as it is. Idempotent: nil when p is
// not registered. Errors wrap admin.ErrInvalid for a bad path, or are
// internal (state file).
func (s *Server) RemoveVolume(p string) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	s.tmu.Lock()
	v := s.reg.vols[p]
	cl := s.reg.clones[p]
	if v == nil && cl == nil {
		s.tmu.Unlock()
		return nil
	}
	delete(s.reg.vols, p)
	delete(s.reg.clones, p)
	err = s.rebuildLocked()
	if err == nil {
		err = s.saveLocked()
	}
	if err != nil {
		if v != nil {
			s.reg.vols[p] = v
		}
		if cl != nil {
			s.reg.clones[p] = cl
		}
		s.rebuildLocked()
		s.tmu.Unlock()
		return err
	}
	s.tmu.Unlock()
	if cl != nil {
		cl.job.cancelAndWait()
	}
	klog.InfoS("nfs server: volume unregistered", "volume", p)
	return nil
}

// Volume returns registered volume p, its usage taken after a fresh stat
// of its files with unsynced data (blocks writeback allocated since their
// last call are counted); admin.ErrNotFound when it is not registered,
// admin.ErrInvalid for a bad path.
func (s *Server) Volume(p string) (admin.Volume, error) {
	p, err := volumePath(p)
	if err != nil {
		return admin.Volume{}, err
	}
	s.tmu.Lock()
	v := s.reg.vols[p]
	s.tmu.Unlock()
	if v == nil {
		return admin.Volume{}, fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, p)
	}
	v.refreshDirty()
	s.tmu.Lock()
	defer s.tmu.Unlock()
	return v.info(), nil
}

// Volumes returns every registered volume, sorted by path.
func (s *Server) Volumes() []admin.Volume {
	s.tmu.Lock()
	vs := s.reg.sortedVolumes()
	s.tmu.Unlock()
	for _, v := range vs {
		v.refreshDirty()
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
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
	out := admin.Access{Node: a.Node, ReadOnly: a.ReadOnly, Addrs: make([]string, 0, len(a.Addrs))}
	for _, s := range a.Addrs {
		p, err := parsePrefix(strings.TrimSpace(s))
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
func (s *Server) Grant(p string, a admin.Access) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	a, err = checkAccess(a)
	if err != nil {
		return err
	}
	return s.changeAccess(p, func(acc []admin.Access) []admin.Access {
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
func (s *Server) Revoke(p, node string) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	return s.changeAccess(p, func(acc []admin.Access) []admin.Access {
		return slices.DeleteFunc(acc, func(x admin.Access) bool { return x.Node == node })
	}, "revoke", admin.Access{Node: node})
}

func (s *Server) changeAccess(p string, f func([]admin.Access) []admin.Access, what string, a admin.Access) error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	v := s.reg.vols[p]
	if v == nil {
		return fmt.Errorf("%w: volume %q is not registered", admin.ErrNotFound, p)
	}
	old := v.access
	v.access = f(slices.Clone(old))
	err := s.rebuildLocked()
	if err == nil {
		err = s.saveLocked()
	}
	if err != nil {
		v.access = old
		s.rebuildLocked()
		return err
	}
	klog.InfoS("nfs server: volume access "+what, "volume", p, "node", a.Node, "addrs", a.Addrs, "readOnly", a.ReadOnly, "nodes", len(v.access))
	return nil
}
