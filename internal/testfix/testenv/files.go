package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// MustWrite writes data to path (mode 0644), creating its parent
// directories (mode 0755); it fails t on any error.
func MustWrite(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TmpfsFile writes data to a new file on tmpfs (in a directory of its own
// under /dev/shm, or in t.TempDir() where there is none, with the
// page-cache behaviour of the disk then) and returns it open for reading.
// The file is closed and removed when t ends.
func TmpfsFile(t testing.TB, data []byte) *os.File {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "nfsrdma-test-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	name := filepath.Join(dir, "data")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
