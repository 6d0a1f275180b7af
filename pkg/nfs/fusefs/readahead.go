package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysBDI is where the kernel lists backing devices (bdi), one directory
// per file system "MAJOR:MINOR" of its st_dev.
const sysBDI = "/sys/class/bdi"

// SetReadAhead sets the kernel read-ahead of the FUSE file system mounted
// on dir to kib KiB: it writes read_ahead_kb of the file system's backing
// device (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb, MAJOR:MINOR of dir's
// st_dev), as one tunes a Linux NFS mount. FUSE asks for the kernel's
// default (128 KiB) at INIT and cannot raise it there; a larger window lets
// the kernel keep several 1 MiB READs in flight for a sequential reader.
// Readahead pages are page cache, reclaimable as any.
//
// It needs write access to /sys (root; in a container, a privileged one).
// Errors: stat(2)'s on dir, and the write's (os.ErrPermission,
// os.ErrNotExist when /sys is not mounted).
func SetReadAhead(dir string, kib int) error {
	p, err := readAheadPath(dir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(kib)), 0); err != nil {
		return fmt.Errorf("fusefs: read-ahead of %s: %w", dir, err)
	}
	return nil
}

// ReadAhead returns the kernel read-ahead of the file system mounted on
// dir, in KiB (see SetReadAhead). Errors: stat(2)'s, the read's, and a
// malformed value.
func ReadAhead(dir string) (int, error) {
	p, err := readAheadPath(dir)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("fusefs: read-ahead of %s: %w", dir, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("fusefs: read-ahead of %s: %s: %w", dir, p, err)
	}
	return n, nil
}

// readAheadPath returns the read_ahead_kb file of the backing device of
// the file system mounted on dir.
func readAheadPath(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", fmt.Errorf("fusefs: read-ahead: stat %s: %w", dir, err)
	}
	return filepath.Join(sysBDI, fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), "read_ahead_kb"), nil
}
