// Package atomicfile replaces a small file whole or not at all, and
// durably: the state files of the volume registry, the mounter and NSM.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with b: it writes a temporary file beside it
// (".NAME.tmp…", mode 0600), syncs it, renames it over path and syncs the
// directory, so that after a crash path holds either its old or its new
// content. Errors are the failing step's, wrapped with the path; the
// temporary file is removed on failure.
func Write(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync %s: %w", path, dir, err)
	}
	return nil
}
