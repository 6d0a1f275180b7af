package volumes

import (
	"context"
	"errors"
	"io"
	"os"
	"path"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// copyChunk is the most bytes one copy_file_range(2) (or read/write)
// moves, so that progress and cancellation are seen at least that often.
const copyChunk = 8 << 20

// treeCopier copies a directory tree into an empty one, preserving type
// (directories, regular files with their holes, symlinks, FIFOs, sockets,
// devices), mode, owner, atime and mtime, and hard links within the tree.
// Extended attributes and POSIX ACLs are not copied. It never follows a
// symlink and does not descend into other file systems (mount points
// become empty directories). Data moves with FICLONE (a reflink) when the
// file systems allow it, copy_file_range(2) otherwise, read/write as a
// last resort.
type treeCopier struct {
	ctx    context.Context
	copied *atomic.Int64 // bytes done, apparent file sizes
	dev    uint64        // the source's file system
	links  map[uint64]string
	buf    []byte
	dst    *os.File // destination root, for hard links
	pace   func()   // tests: called after each chunk copied; set, no reflinks
}

// copyTree copies the contents of directory src into directory dst (both
// open for reading), then src's own attributes onto dst, adding each
// regular file's size to copied as it goes. It stops at the first error
// or when ctx ends.
func copyTree(ctx context.Context, src, dst *os.File, copied *atomic.Int64, pace func()) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return err
	}
	tc := &treeCopier{ctx: ctx, copied: copied, dev: st.Dev, links: map[uint64]string{}, dst: dst, pace: pace}
	if err := tc.copyDir(src, dst, ""); err != nil {
		return err
	}
	return setAttrs(int(dst.Fd()), &st)
}

func (tc *treeCopier) copyDir(src, dst *os.File, rel string) error {
	for {
		names, rerr := src.Readdirnames(256)
		for _, name := range names {
			if err := tc.ctx.Err(); err != nil {
				return err
			}
			if err := tc.copyEntry(src, dst, name, path.Join(rel, name)); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (tc *treeCopier) copyEntry(src, dst *os.File, name, rel string) error {
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed meanwhile
		}
		return &os.PathError{Op: "fstatat", Path: rel, Err: err}
	}
	wrap := func(op string, err error) error {
		if err == nil {
			return nil
		}
		return &os.PathError{Op: op, Path: rel, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return wrap("mkdirat", err)
		}
		if st.Dev != tc.dev {
			return nil // a mount point: not crossed
		}
		s, err := openDirAt(sfd, name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		defer s.Close()
		d, err := openDirAt(dfd, name)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := tc.copyDir(s, d, rel); err != nil {
			return err
		}
		return wrap("setattr", setAttrs(int(d.Fd()), &st))
	case unix.S_IFREG:
		if st.Nlink > 1 {
			if first, ok := tc.links[st.Ino]; ok {
				return wrap("linkat", unix.Linkat(int(tc.dst.Fd()), first, dfd, name, 0))
			}
			tc.links[st.Ino] = rel
		}
		return wrap("copy", tc.copyFile(sfd, dfd, name))
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(sfd, name, buf)
		if err != nil {
			return wrap("readlinkat", err)
		}
		if err := unix.Symlinkat(string(buf[:n]), dfd, name); err != nil {
			return wrap("symlinkat", err)
		}
		return wrap("setattr", setAttrsAt(dfd, name, &st, true))
	default: // FIFO, socket, character or block device
		if err := unix.Mknodat(dfd, name, st.Mode&unix.S_IFMT|0o600, int(st.Rdev)); err != nil {
			return wrap("mknodat", err)
		}
		return wrap("setattr", setAttrsAt(dfd, name, &st, false))
	}
}

// copyFile copies regular file name of sfd into a new file of dfd.
func (tc *treeCopier) copyFile(sfd, dfd int, name string) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		in, err = unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	defer unix.Close(in)
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // replaced meanwhile
	}
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(out)
	if st.Size > 0 && tc.pace == nil && unix.IoctlFileClone(out, in) == nil {
		tc.copied.Add(st.Size)
		return setAttrs(out, &st)
	}
	if err := tc.copyData(in, out, st.Size); err != nil {
		return err
	}
	return setAttrs(out, &st)
}

// copyData copies size bytes of in to out, skipping holes (SEEK_DATA,
// SEEK_HOLE) so that a sparse file stays sparse.
func (tc *treeCopier) copyData(in, out int, size int64) error {
	off := int64(0)
	for off < size {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // a hole up to the end
		}
		if err != nil { // no SEEK_DATA: all data
			data = off
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		tc.copied.Add(data - off)
		if err := tc.copyRange(in, out, data, hole); err != nil {
			return err
		}
		off = hole
	}
	if off < size {
		tc.copied.Add(size - off)
	}
	return unix.Ftruncate(out, size)
}

// copyRange copies bytes [from, to) of in to the same offsets of out.
func (tc *treeCopier) copyRange(in, out int, from, to int64) error {
	useCFR := true
	for from < to {
		if err := tc.ctx.Err(); err != nil {
			return err
		}
		n := int(min(to-from, copyChunk))
		if useCFR {
			roff, woff := from, from
			m, err := unix.CopyFileRange(in, &roff, out, &woff, n, 0)
			switch {
			case err == unix.EINTR:
				continue
			case err == nil && m > 0:
				from += int64(m)
				tc.copied.Add(int64(m))
				if tc.pace != nil {
					tc.pace()
				}
				continue
			case err == nil: // m == 0: the file shrank
				return nil
			case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
				useCFR = false
			default:
				return err
			}
		}
		if tc.buf == nil {
			tc.buf = make([]byte, 1<<20)
		}
		b := tc.buf[:min(n, len(tc.buf))]
		m, err := unix.Pread(in, b, from)
		switch {
		case err == unix.EINTR:
			continue
		case err == nil && m == 0: // the file shrank
			return nil
		case err != nil:
			return err
		}
		if m > 0 {
			if _, werr := pwriteAll(out, b[:m], from); werr != nil {
				return werr
			}
			from += int64(m)
			tc.copied.Add(int64(m))
			if tc.pace != nil {
				tc.pace()
			}
		}
	}
	return nil
}

func pwriteAll(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pwrite(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// setAttrs gives the open object fd the owner, mode, atime and mtime of st
// (the owner first: chown clears set-id bits).
func setAttrs(fd int, st *unix.Stat_t) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
}

// setAttrsAt is setAttrs for name in dirfd, a symlink (no mode) or a
// special file.
func setAttrsAt(dirfd int, name string, st *unix.Stat_t, symlink bool) error {
	if err := unix.Fchownat(dirfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if !symlink {
		if err := unix.Fchmodat(dirfd, name, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// removeContents removes everything in directory dir (never following a
// symlink), leaving dir itself.
func removeContents(dir *os.File) error {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	fd := int(dir.Fd())
	for _, name := range names {
		err := unix.Unlinkat(fd, name, 0)
		if errors.Is(err, unix.EISDIR) {
			sub, oerr := openDirAt(fd, name)
			if oerr != nil {
				return oerr
			}
			err = removeContents(sub)
			sub.Close()
			if err == nil {
				err = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
			}
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "unlinkat", Path: name, Err: err}
		}
	}
	return nil
}
