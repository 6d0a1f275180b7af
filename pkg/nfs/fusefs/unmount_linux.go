package fusefs

import "golang.org/x/sys/unix"

const mntDetach = unix.MNT_DETACH

func syscallUnmount(dir string, flags int) error { return unix.Unmount(dir, flags) }
