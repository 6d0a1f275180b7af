package volumes

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// Volume directories are made and removed by the registry itself, on the
// admin API's request, so that the CSI controller needs no NFS access to
// the server's root: every path is walked one component at a time from
// the root's descriptor, never following a symlink and never crossing
// into another file system.

// maxRemoveDepth bounds the directory depth RemoveVolumeDir descends to.
const maxRemoveDepth = 512

// MakeVolumeDir creates directory p (relative to the root, see
// admin.Volume.Path), its missing parents with mode 0755, and sets p's
// mode to mode (permission bits, setgid and sticky; the umask does not
// apply). An existing directory is kept and its mode set (idempotent).
// It refuses a path that is, contains or lies in another registered
// volume or a static export other than "/". Errors wrap admin.ErrInvalid
// (bad path or mode), admin.ErrPrecondition (a component that is not a
// directory, a symlink, a mount point, an overlap), or are internal.
func (r *Registry) MakeVolumeDir(p string, mode uint32) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	if mode&^uint32(0o7777) != 0 || mode&0o4000 != 0 {
		return fmt.Errorf("%w: directory mode %#o: want permission bits, setgid and sticky", admin.ErrInvalid, mode)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.conflictLocked(p); err != nil {
		return err
	}
	var root unix.Stat_t
	if err := unix.Fstat(r.rootFD, &root); err != nil {
		return fmt.Errorf("volumes: stat of the root: %w", err)
	}
	fd, err := unix.Dup(r.rootFD)
	if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	comps := strings.Split(p, "/")
	created := false
	for i, name := range comps {
		m := uint32(0o755)
		if i == len(comps)-1 {
			m = mode
		}
		err := unix.Mkdirat(fd, name, m)
		created = err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return dirError(path.Join(comps[:i+1]...), "mkdir", err)
		}
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return dirError(path.Join(comps[:i+1]...), "open", err)
		}
		fd = nfd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fmt.Errorf("volumes: %w", err)
		}
		if st.Dev != root.Dev {
			unix.Close(fd)
			return fmt.Errorf("%w: volume directory %q: %q is on another file system", admin.ErrPrecondition, p, path.Join(comps[:i+1]...))
		}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("volumes: volume directory %q: chmod: %w", p, err)
	}
	if created {
		klog.InfoS("volumes: volume directory made", "volume", p, "mode", fmt.Sprintf("%#o", mode))
	}
	return nil
}

// dirError wraps err of op on path p: admin.ErrPrecondition for what the
// tree's state causes (not a directory, a symlink), internal otherwise.
func dirError(p, op string, err error) error {
	switch {
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EEXIST), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: volume directory %q: %s: not a directory (or a symlink): %w", admin.ErrPrecondition, p, op, err)
	}
	return fmt.Errorf("volumes: volume directory %q: %s: %w", p, op, err)
}

// RemoveVolumeDir disposes of directory p, which must no longer be a
// registered volume (RemoveVolume first): admin.DirectoryDelete removes its tree
// (never following a symlink; a mount point inside it fails the removal),
// admin.DirectoryArchive renames it "archived-NAME" in its parent (an existing empty
// archive of that name is replaced, a non-empty one kept and the new one
// named "archived-NAME-UNIXTIME"), admin.DirectoryRetain does nothing. A missing
// directory is not an error (idempotent). Errors wrap admin.ErrInvalid
// (bad path or how), admin.ErrPrecondition (p is registered, contains or
// lies in a volume or a static export other than "/"), or are internal.
func (r *Registry) RemoveVolumeDir(p, how string) error {
	p, err := volumePath(p)
	if err != nil {
		return err
	}
	switch how {
	case admin.DirectoryRetain, admin.DirectoryDelete, admin.DirectoryArchive:
	default:
		return fmt.Errorf("%w: directory disposal %q: want %s, %s or %s", admin.ErrInvalid, how, admin.DirectoryRetain, admin.DirectoryDelete, admin.DirectoryArchive)
	}
	r.mu.Lock()
	if r.vols[p] != nil {
		r.mu.Unlock()
		return fmt.Errorf("%w: %q is a registered volume: unregister it first", admin.ErrPrecondition, p)
	}
	err = r.conflictLocked(p)
	r.mu.Unlock()
	if err != nil || how == admin.DirectoryRetain {
		return err
	}
	dir, name := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	pd, err := openDirBeneath(r.rootFD, dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return dirError(dir, "open", err)
	}
	defer pd.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(pd.Fd()), &st); err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	if how == admin.DirectoryArchive {
		to := "archived-" + name
		err := unix.Renameat(int(pd.Fd()), name, int(pd.Fd()), to)
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			to = fmt.Sprintf("archived-%s-%d", name, time.Now().Unix())
			err = unix.Renameat(int(pd.Fd()), name, int(pd.Fd()), to)
		}
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case err != nil:
			return fmt.Errorf("volumes: archiving %q: %w", p, err)
		}
		klog.InfoS("volumes: volume directory archived", "volume", p, "to", path.Join(dir, to))
		return nil
	}
	if err := removeAllAt(int(pd.Fd()), name, st.Dev, 0); err != nil {
		return fmt.Errorf("volumes: removing %q: %w", p, err)
	}
	klog.InfoS("volumes: volume directory removed", "volume", p)
	return nil
}

// removeAllAt removes name in directory dirfd and, for a directory, its
// tree, depth first; it never follows a symlink and fails on a directory
// of another file system than dev. A name already gone is no error.
func removeAllAt(dirfd int, name string, dev uint64, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "unlinkat", Path: name, Err: err}
		}
		return nil
	}
	if st.Dev != dev {
		return fmt.Errorf("%s: a mount point (another file system)", name)
	}
	if depth >= maxRemoveDepth {
		return fmt.Errorf("%s: deeper than %d levels", name, maxRemoveDepth)
	}
	d, err := openDirAt(dirfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	for {
		names, err := d.Readdirnames(-1)
		if err != nil {
			d.Close()
			return err
		}
		if len(names) == 0 {
			break
		}
		for _, n := range names {
			if err := removeAllAt(int(d.Fd()), n, dev, depth+1); err != nil {
				d.Close()
				return fmt.Errorf("%s/%w", name, err)
			}
		}
		if _, err := d.Seek(0, 0); err != nil {
			d.Close()
			return err
		}
	}
	d.Close()
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}
