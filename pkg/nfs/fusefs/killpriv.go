package fusefs

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
