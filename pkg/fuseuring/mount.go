package fuseuring

import (
	"bufio"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// EnableParam is the fuse module's parameter that lets connections use
// io_uring ("Y" or "N"; root may write "1" or "0"); it is missing from
// kernels built without CONFIG_FUSE_IO_URING.
const EnableParam = "/sys/module/fuse/parameters/enable_uring"

// ErrUnavailable is returned when FUSE over io_uring is required but the
// kernel does not offer it.
var ErrUnavailable = errors.New("fuseuring: FUSE over io_uring unavailable")

// Available reports whether new FUSE connections may use io_uring: the
// kernel has it (EnableParam exists) and it is enabled, and io_uring
// itself is not disabled (kernel.io_uring_disabled 2). A nil error
// means available; otherwise the error wraps ErrUnavailable and says why.
func Available() error {
	b, err := os.ReadFile(EnableParam)
	if err != nil {
		return fmt.Errorf("%w: %v (a kernel without CONFIG_FUSE_IO_URING)", ErrUnavailable, err)
	}
	if v := strings.TrimSpace(string(b)); v != "Y" && v != "1" {
		return fmt.Errorf("%w: %s is %s", ErrUnavailable, EnableParam, v)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled"); err == nil && strings.TrimSpace(string(b)) == "2" {
		return fmt.Errorf("%w: kernel.io_uring_disabled is 2", ErrUnavailable)
	}
	return nil
}

// Mount opens /dev/fuse and mounts it on dir (mount(2), which needs
// CAP_SYS_ADMIN), as go-fuse's direct mount does: source opts.FsName,
// type "fuse."+opts.Name, data fd, rootmode, user_id, group_id,
// allow_other (opts.AllowOther), max_read (opts.MaxWrite) and
// opts.Options ("ro" becomes MS_RDONLY); nosuid, nodev. It returns the
// fd for NewServer; accesses to dir wait until Start answers INIT.
func Mount(dir string, opts *fuse.MountOptions) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return -1, fmt.Errorf("fuseuring: stat %s: %w", dir, err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("fuseuring: open /dev/fuse: %w", err)
	}
	data := []string{
		"fd=" + strconv.Itoa(fd),
		fmt.Sprintf("rootmode=%o", st.Mode&unix.S_IFMT),
		"user_id=" + strconv.Itoa(os.Geteuid()),
		"group_id=" + strconv.Itoa(os.Getegid()),
	}
	if opts.AllowOther {
		data = append(data, "allow_other")
	}
	if opts.MaxWrite > 0 {
		data = append(data, "max_read="+strconv.Itoa(opts.MaxWrite))
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	for _, o := range opts.Options {
		if o == "ro" {
			flags |= unix.MS_RDONLY
			continue
		}
		data = append(data, o)
	}
	typ := "fuse"
	if opts.Name != "" {
		typ += "." + opts.Name
	}
	source := opts.FsName
	if source == "" {
		source = "fuseuring"
	}
	if err := unix.Mount(source, dir, typ, flags, strings.Join(data, ",")); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("fuseuring: mount %s: %w", dir, err)
	}
	return fd, nil
}

// ConnectionID returns the FUSE connection number of the mount on dir
// (the minor of its st_dev, the directory name under
// /sys/fs/fuse/connections), read from /proc/self/mountinfo so that no
// request reaches the mount. The topmost mount on dir counts.
func ConnectionID(dir string) (uint64, error) {
	dir = filepath.Clean(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	id, found := uint64(0), false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || unescapeMountPath(fs[4]) != dir {
			continue
		}
		_, minor, ok := strings.Cut(fs[2], ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(minor, 10, 32); err == nil {
			id, found = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("fuseuring: no mount on %s", dir)
	}
	return id, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// AbortConnection aborts FUSE connection id through fusectl
// (/sys/fs/fuse/connections/ID/abort, mounting fusectl if needed): every
// request in flight or to come fails with ENOTCONN, and the server reads
// ENODEV.
func AbortConnection(id uint64) error {
	const ctl = "/sys/fs/fuse/connections"
	if ents, err := os.ReadDir(ctl); err != nil || len(ents) == 0 {
		_ = unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	return os.WriteFile(ctl+"/"+strconv.FormatUint(id, 10)+"/abort", []byte("1"), 0)
}

// Abort aborts the FUSE connection of the mount on dir (ConnectionID,
// AbortConnection).
func Abort(dir string) error {
	id, err := ConnectionID(dir)
	if err != nil {
		return err
	}
	return AbortConnection(id)
}

func defaultLogger() *log.Logger { return log.Default() }
