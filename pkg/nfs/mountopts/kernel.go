package mountopts

// KernelOptions are the FUSE mount options (mount(2) data) that every
// mount of the NFS file system (pkg/nfs/fusefs) has besides fd, rootmode,
// user_id, group_id, allow_other and max_read: "default_permissions", so
// that the kernel checks the mode bits of every access (path walks, opens
// of FIFOs and device nodes, which never reach the file system, access(2))
// with the cached attributes, refreshing them when their timeout has
// passed and once more before it denies (fusefs's package doc,
// Permissions). A process that mounts /dev/fuse for fusefs.Serve
// (Config.FD) must pass them to mount(2).
var KernelOptions = []string{"default_permissions"}
