package csi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	mountutils "k8s.io/mount-utils"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// fuseType is the file system type of our mounts in /proc/self/mountinfo.
const fuseType = "fuse.nfsrdma"

// mountFUSE opens /dev/fuse and mounts it on target (mount(2), as
// libfuse's and go-fuse's direct mount do: fd, rootmode, user_id,
// group_id, allow_other, max_read, and mountopts.KernelOptions; nosuid,
// nodev), returning the fd for the FUSE server. Until a server answers
// INIT on it, accesses to target block; closing the fd without one aborts
// the connection.
func mountFUSE(source, target string, readOnly bool) (*os.File, error) {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", target, err)
	}
	opts := strings.Join(append([]string{
		"fd=" + strconv.Itoa(int(f.Fd())),
		fmt.Sprintf("rootmode=%o", st.Mode&unix.S_IFMT),
		"user_id=0", "group_id=0", "allow_other",
		"max_read=" + strconv.Itoa(client.MaxIOSize), // fusefs.MaxWrite, the largest READ it serves
	}, mountopts.KernelOptions...), ",")
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(source, target, fuseType, flags, opts); err != nil {
		f.Close()
		return nil, fmt.Errorf("mount %s on %s: %w", source, target, err)
	}
	return f, nil
}

// mountAt returns our FUSE mount on target, if any, from
// /proc/self/mountinfo (never touching target itself, which may hang on a
// dead or stuck mount).
func mountAt(target string) (mountutils.MountInfo, bool, error) {
	mis, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return mountutils.MountInfo{}, false, err
	}
	var found mountutils.MountInfo
	ok := false
	for _, mi := range mis {
		if mi.MountPoint == target {
			found, ok = mi, true // the last one is on top
		}
	}
	return found, ok, nil
}

// healthy checks a mount by stat(2) of its root, bounded by timeout: a
// FUSE mount whose server is gone answers ENOTCONN ("transport endpoint
// is not connected"); a stuck one does not answer.
func healthy(target string, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		var st unix.Statfs_t
		errc <- unix.Statfs(target, &st)
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("statfs %s: no answer within %v", target, timeout)
	}
}

// unmount unmounts target: umount(2) retried while busy for up to
// timeout, then a lazy unmount (MNT_DETACH), which never waits for the
// FUSE server or the NFS server. Not mounted is success.
func unmount(target string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Unmount(target, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT):
			if _, ok, _ := mountAt(target); !ok {
				return nil
			}
		case errors.Is(err, syscall.EBUSY):
		default:
			klog.InfoS("node: unmount failed; detaching", "target", target, "err", err)
			return unix.Unmount(target, unix.MNT_DETACH)
		}
		if time.Now().After(deadline) {
			klog.InfoS("node: mount busy; detaching lazily", "target", target, "waited", timeout)
			return unix.Unmount(target, unix.MNT_DETACH)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// within reports whether p is root or below it (both clean and absolute).
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// removeTarget removes the (empty) target directory; already gone is fine.
func removeTarget(target string) error {
	err := os.Remove(target)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("remove %s: %w", filepath.Clean(target), err)
}
