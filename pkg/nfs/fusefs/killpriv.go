package fusefs

// KernelOptions are the FUSE mount options every mount of this file system
// has, besides fd, rootmode, user_id, group_id, allow_other and max_read:
// "default_permissions", so that the kernel checks the mode bits of every
// access (path walks, opens of FIFOs and device nodes, which never reach
// the file system, access(2)) with the cached attributes, refreshing them
// when their timeout has passed and once more before it denies (see the
// package doc, Permissions). A process that mounts /dev/fuse for Serve
// (Config.FD) must pass them to mount(2).
var KernelOptions = []string{"default_permissions"}

// capHandleKillprivV2 is FUSE_HANDLE_KILLPRIV_V2 in the INIT flags (Linux
// include/uapi/linux/fuse.h, protocol 7.33, Linux 5.11): the file system
// clears the set-user-ID and set-group-ID bits itself on a WRITE
// (FUSE_WRITE_KILL_SUIDGID), a SETATTR of the size (FATTR_KILL_SUIDGID)
// and a chown, so the kernel does not first send a SETATTR of the mode as
// the writer, which the server refuses to anyone but the file's owner.
// The server clears them as Linux does for a local file (pkg/nfs/server:
// WRITE and SETATTR of the size by a caller other than root, chown by
// anyone). go-fuse names no constant for this bit.
const capHandleKillprivV2 = 1 << 28
