package volumes

import (
	"context"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// beneath is the resolution of every path the registry opens by name
// under its root (volume directories, copy sources and destinations): no
// symlink, no "..", no mount point.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS

// openDirBeneath opens directory rel (relative, cleaned) beneath rootFD
// for reading, never following a symlink.
func openDirBeneath(rootFD int, rel string) (*os.File, error) {
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: beneath,
	})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// openDirAt opens directory name in dirfd for reading, never following
// a symlink (ENOTDIR or ELOOP for one).
func openDirAt(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// walkFunc is called for each entry name of directory dir with its
// lstat; returning errSkipDir for a directory skips its contents.
type walkFunc func(dir *os.File, name string, st *unix.Stat_t) error

var errSkipDir = errors.New("skip directory")

// walkTree calls fn for every entry beneath dir, depth first, a directory
// before its contents; it does not descend into directories on another
// file system than dev (mount points) and never follows a symlink. It
// stops at the first error of fn or of the file system, or when ctx ends.
func walkTree(ctx context.Context, dir *os.File, dev uint64, fn walkFunc) error {
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			if err := ctx.Err(); err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed meanwhile
				}
				return &os.PathError{Op: "fstatat", Path: name, Err: err}
			}
			ferr := fn(dir, name, &st)
			if ferr == errSkipDir {
				continue
			}
			if ferr != nil {
				return ferr
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != dev {
				continue
			}
			sub, err := openDirAt(int(dir.Fd()), name)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return err
			}
			err = walkTree(ctx, sub, dev, fn)
			sub.Close()
			if err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// usage is what a tree holds.
type usage struct {
	bytes  int64 // allocated, st_blocks*512, hard links once
	inodes int64 // the root included
	size   int64 // apparent size of regular files, hard links once
}

// dirUsage walks the open directory d.
func dirUsage(ctx context.Context, d *os.File) (usage, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return usage{}, err
	}
	u := usage{bytes: st.Blocks * 512, inodes: 1}
	seen := map[uint64]bool{}
	err := walkTree(ctx, d, st.Dev, func(_ *os.File, _ string, est *unix.Stat_t) error {
		if est.Nlink > 1 && est.Mode&unix.S_IFMT != unix.S_IFDIR {
			if seen[est.Ino] {
				return nil
			}
			seen[est.Ino] = true
		}
		u.bytes += est.Blocks * 512
		u.inodes++
		if est.Mode&unix.S_IFMT == unix.S_IFREG {
			u.size += est.Size
		}
		return nil
	})
	return u, err
}
