package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestRemovedByAnotherMount: a file that another client removed, whose
// name this mount still knows (a fresh walk cache in a directory not
// searchable by all, so each walk reaches Lookup), is found gone when it
// is opened again: the open's ESTALE makes the kernel walk again, and that
// walk must LOOKUP the server rather than find the stale node, so stat
// says ENOENT and O_CREAT makes a new file, as on Linux NFS. SQLite's
// rollback journal is made and removed this way by each writer.
func TestRemovedByAnotherMount(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	if err := os.Chmod(srv.root, 0o700); err != nil {
		t.Fatal(err)
	}
	d1, _ := srv.mount(t, mountopts.ProtoTCP, "")
	d2, _ := srv.mount(t, mountopts.ProtoTCP, "")
	p1, p2 := filepath.Join(d1, "journal"), filepath.Join(d2, "journal")
	for round := range 3 {
		if err := os.WriteFile(p1, []byte("one"), 0o644); err != nil {
			t.Fatalf("round %d: create through mount 1: %v", round, err)
		}
		if _, err := os.Stat(p1); err != nil {
			t.Fatalf("round %d: stat through mount 1: %v", round, err)
		}
		if err := os.Remove(p2); err != nil {
			t.Fatalf("round %d: remove through mount 2: %v", round, err)
		}
		f, err := os.OpenFile(p1, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatalf("round %d: open O_CREAT of a name another mount removed: %v", round, err)
		}
		f.Close()
		if err := os.Remove(p1); err != nil {
			t.Fatalf("round %d: remove through mount 1: %v", round, err)
		}
	}
}

// TestStaleHandle: a file or directory that another client removed, whose
// name this mount still knows (fresh caches, in a directory not searchable
// by all, so each walk reaches Lookup), is gone for every operation: by
// path, the server's NFS3ERR_STALE makes the kernel walk again, and that
// walk must LOOKUP the server, so the caller sees ENOENT, whichever
// operation found the handle stale (node.call); through a descriptor
// opened before the removal, the operations the server answers are
// ESTALE, as on Linux NFS.
func TestStaleHandle(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	if err := os.Chmod(srv.root, 0o700); err != nil {
		t.Fatal(err)
	}
	d1, _ := srv.mount(t, mountopts.ProtoTCP, "")
	d2, _ := srv.mount(t, mountopts.ProtoTCP, "")
	// known makes name through mount 1 (a file, a directory with mkdir,
	// a symbolic link with symlink), stats it there, and removes it
	// through mount 2; it returns the path through mount 1
	known := func(t *testing.T, name, kind string) string {
		t.Helper()
		p1, p2 := filepath.Join(d1, name), filepath.Join(d2, name)
		switch kind {
		case "dir":
			must(t, os.Mkdir(p1, 0o755))
		case "symlink":
			must(t, os.Symlink("target", p1))
		default:
			must(t, os.WriteFile(p1, []byte("data"), 0o644))
		}
		if _, err := os.Lstat(p1); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(p2); err != nil {
			t.Fatal(err)
		}
		must(t, os.Remove(p2))
		return p1
	}
	for _, tc := range []struct {
		op   string
		kind string
		do   func(p string) error
	}{
		{"open O_RDONLY", "file", func(p string) error { return closeAfter(os.Open(p)) }},
		{"open O_WRONLY", "file", func(p string) error { return closeAfter(os.OpenFile(p, os.O_WRONLY, 0)) }},
		{"chmod", "file", func(p string) error { return os.Chmod(p, 0o600) }},
		{"chown", "file", func(p string) error { return os.Chown(p, 1000, 1000) }},
		{"truncate", "file", func(p string) error { return os.Truncate(p, 1) }},
		{"utimes", "file", func(p string) error { return os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)) }},
		{"link", "file", func(p string) error { return os.Link(p, p+".link") }},
		{"readlink", "symlink", func(p string) error { _, err := os.Readlink(p); return err }},
		{"create in", "dir", func(p string) error { return os.WriteFile(filepath.Join(p, "new"), nil, 0o644) }},
		{"mkdir in", "dir", func(p string) error { return os.Mkdir(filepath.Join(p, "new"), 0o755) }},
		{"symlink in", "dir", func(p string) error { return os.Symlink("t", filepath.Join(p, "new")) }},
		{"mknod in", "dir", func(p string) error { return syscall.Mkfifo(filepath.Join(p, "new"), 0o644) }},
		{"rename into", "dir", func(p string) error {
			src := filepath.Join(d1, "rename-src")
			if err := os.WriteFile(src, nil, 0o644); err != nil {
				return err
			}
			return os.Rename(src, filepath.Join(p, "new"))
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			p := known(t, strings.ReplaceAll(tc.op, " ", "-"), tc.kind)
			if err := tc.do(p); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("%s %s removed through another mount: %v, want ENOENT", tc.op, tc.kind, err)
			}
		})
	}
	for _, tc := range []struct {
		op string
		do func(f *os.File) error
	}{
		{"fchmod", func(f *os.File) error { return f.Chmod(0o600) }},
		{"fchown", func(f *os.File) error { return f.Chown(1000, 1000) }},
		{"ftruncate", func(f *os.File) error { return f.Truncate(1) }},
		{"write and fsync", func(f *os.File) error {
			if _, err := f.Write([]byte("more")); err != nil {
				return err
			}
			return f.Sync()
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			name := strings.ReplaceAll(tc.op, " ", "-")
			p1 := filepath.Join(d1, name)
			must(t, os.WriteFile(p1, []byte("data"), 0o644))
			f, err := os.OpenFile(p1, os.O_RDWR, 0)
			must(t, err)
			defer f.Close()
			must(t, os.Remove(filepath.Join(d2, name)))
			if err := tc.do(f); !errors.Is(err, syscall.ESTALE) {
				t.Errorf("%s of an open file removed through another mount: %v, want ESTALE", tc.op, err)
			}
			// and by path, it is gone
			if _, err := os.Open(p1); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("open after %s: %v, want ENOENT", tc.op, err)
			}
		})
	}
}

// closeAfter closes the file os.Open returned, if any, and returns the
// open's error.
func closeAfter(f *os.File, err error) error {
	if f != nil {
		f.Close()
	}
	return err
}
