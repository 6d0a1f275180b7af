package plugin

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// fuseURingParam is the fuse module's switch for FUSE over io_uring
// (Linux 6.14 and later built with CONFIG_FUSE_IO_URING; "N" until root
// writes "1"). Mounts with fuse_uring=auto use io_uring only where it is
// "Y" (pkg/fuseuring.Available).
const fuseURingParam = "/sys/module/fuse/parameters/enable_uring"

// enableFUSEURing writes "1" to the fuse module's enable_uring at path
// (which needs root and a writable /sys: a privileged container) and
// checks that it reads "Y". Errors: a kernel without the parameter, the
// write's (EACCES, EROFS), a value that did not change.
func enableFUSEURing(path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s missing: a kernel without FUSE over io_uring (CONFIG_FUSE_IO_URING)", path)
	}
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if v := strings.TrimSpace(string(b)); v != "Y" && v != "1" {
		return fmt.Errorf("%s reads %q after writing 1", path, v)
	}
	return nil
}
