// Package fusefs is a FUSE file system over the user-space NFSv3 client
// (pkg/nfs/client), with the behaviour of the Linux NFS client where FUSE
// lets us have it.
//
// # Mapping
//
// It uses go-fuse's node API (fs.InodeEmbedder) rather than the raw
// protocol: go-fuse then keeps the kernel's node IDs, lookup counts and
// FORGET bookkeeping. As in go-fuse's loopback file system, two types
// answer the kernel:
//
//   - a node (node.go) is what a file or directory is: its NFS file
//     handle, its attributes and their cache, the server's ACCESS answers
//     for it, lookups, directory changes and listings (dir.go,
//     readdir.go), opens (Open);
//   - an open file (openFile, openfile.go) is what an OPEN or CREATE of
//     a regular file does, go-fuse's file handle: READ (read.go), WRITE
//     (writeback.go), FLUSH, FSYNC and RELEASE, and the locks taken
//     through it (lock.go).
//
// What the open files of one inode share, as they share the kernel's page
// cache, is one per inode (sharedFile, referenced from the node from its
// first open on): the write-back of its data and the count of its opens,
// whose last RELEASE ends a silly rename (sillyrename.go).
//
// Nodes are keyed (fs.StableAttr) by the NFS fileid and a hash of the file
// handle as generation, so hard links share one kernel inode and a fileid
// the server reuses for a new file gets a new inode (no stale handle
// behind an old inode).
//
// # NFS semantics
//
//   - Close-to-open: Open GETATTRs the file; when mtime, ctime or size
//     changed since we last saw them, the kernel's cached attributes and
//     pages of the inode are invalidated. Flush (every close) and Fsync
//     wait for the pending writes and COMMIT them, and report a write
//     error, as close(2) does on Linux NFS; closing a descriptor opened
//     read-only writes nothing back and never waits for the server (as
//     nfs_file_flush).
//   - Signals: a signal to the calling thread (FUSE_INTERRUPT) does not
//     cancel its NFS calls, as on Linux NFS, where only a fatal signal
//     does: a call abandoned half-way would answer EINTR for an operation
//     that may have happened (a REMOVE retried by the application, a
//     directory listing that drops entries). An interrupted request's
//     calls are cancelled after InterruptGrace (30 s), at unmount, or at
//     once when its caller is being killed (SIGKILL pending), as a fatal
//     signal ends the wait on Linux NFS.
//   - Soft mounts fail a call with EIO after about (retrans+1) x
//     max(timeo, 1 s), connection attempts included; hard mounts retry
//     until the server answers.
//   - Attribute cache: entry and attribute timeouts given to the kernel
//     follow Linux's adaptive attrtimeo: acregmin/acdirmin after a change,
//     doubled each time the attributes are found unchanged, up to
//     acregmax/acdirmax; noac makes them 0 (the kernel asks every time).
//   - Readahead: the kernel reads ahead; FUSE starts every mount at the
//     kernel's 128 KiB (one 128 KiB READ at a time), so Serve sets the
//     mount's read_ahead_kb (default 4 MiB, SetReadAhead) and FUSE READs
//     of up to 1 MiB (MaxWrite pages) reach us several at a time. Each
//     FUSE READ becomes one client.ReadAt, pipelined in rsize READs.
//   - Write-behind: a FUSE WRITE (at most 1 MiB, MaxWrite) is copied and
//     sent in the background as UNSTABLE WRITEs (client.File); overlapping
//     writes are ordered. READ, GETATTR, SETATTR, FLUSH and FSYNC of the
//     inode wait for the writes in flight first. With noac, writes are
//     synchronous (still UNSTABLE, committed on close).
//   - Known names: a directory this mount made (MKDIR) keeps its whole
//     listing while every change of it comes through the mount (each
//     reply's wcc_data before-attributes must be those the listing is
//     for); a LOOKUP of a name it lacks answers ENOENT without an NFS
//     LOOKUP while the directory's attributes are fresh, the trust Linux
//     gives a negative dentry, so an exclusive create costs one NFS
//     CREATE (dirnames.go).
//   - Permissions: the kernel checks the mode bits, and the server
//     decides what reaches it. The mount has default_permissions
//     (mountopts.KernelOptions): the kernel checks every access against the mode,
//     owner and group of its cached attributes, as for a local file
//     system: each directory of a path walk, opens of every kind of file
//     (FIFOs and device nodes too, which it opens without asking a FUSE
//     file system), access(2), chmod, chown, utimes, the sticky bit. It
//     refreshes the attributes (GETATTR) when their timeout has passed,
//     and once more before it denies, so a permission granted by a chmod
//     on another client is seen at once, one taken away after at most the
//     attribute timeout (with noac at once). Each FUSE request's NFS
//     calls carry its caller's AUTH_SYS credential (uid, gid, groups;
//     cred.go), and the server checks each call; besides, as Linux NFS,
//     the mount asks the server with NFS ACCESS (RFC 1813 section 3.3.4;
//     access.go) at open (read for O_RDONLY and O_RDWR, write for
//     O_WRONLY and O_RDWR, only execute for an exec), at opendir (read),
//     at truncate(2) and O_TRUNC (write; the server lets an owner
//     truncate without it, for ftruncate on a descriptor opened for
//     writing) and at LOOKUP (search), and keeps the answer per inode and
//     credential while the inode's cached attributes are fresh (the
//     attribute timeout; never with noac) and show the same mode, owner
//     and group (a chmod or chown seen by the mount drops it, as
//     nfs_access_zap_cache), at most acregmax/acdirmax. Open GETATTRs
//     first (close-to-open), so an open is decided on the current mode.
//     So what the server refuses beyond the mode bits (root squash:
//     the kernel lets root open anything) is refused at open and at each
//     walk of a directory not searchable by all: the names in such a
//     directory get entry timeout 0 and come to LOOKUP at each walk,
//     answered without an NFS call while fresh. What a user sees: the
//     kernel's checks are the mode bits only, so a server that grants
//     more than the mode bits (ACLs) is not followed where the kernel
//     checks (walks, opens of FIFOs and devices, access(2)), and
//     access(2) answers from the mode bits, also for root on a
//     root-squashed export; a file the server created for a
//     non-exclusive O_CREAT that another client had made meanwhile is
//     not checked (as Linux NFSv3).
//   - Set-user-ID and set-group-ID bits: the mount negotiates
//     FUSE_HANDLE_KILLPRIV_V2 (killpriv.go), so a write, truncate or
//     chown reaches the server as such, and the server clears the bits
//     as Linux does for a local file (a write or truncate by a caller
//     other than root, a chown by anyone); the kernel does not first ask
//     for a SETATTR of the mode as the writer, which the server refuses
//     to a user who does not own the file.
//   - Stale file handles: a request on a node that the server answers
//     NFS3ERR_STALE (the file was removed, by another client too) makes
//     the node forget its cached attributes and where the kernel was told
//     of it (node.call, for every request on a node), so the kernel's
//     retry of a path operation after ESTALE looks the name up on the
//     server and finds it gone: by path a removed file is ENOENT for
//     every operation, through a descriptor opened before ESTALE, as on
//     Linux NFS; a lookup in a directory that is gone is ENOENT.
//   - A write that failed after write(2) returned (write-behind: a
//     refused or failed WRITE or COMMIT) drops the inode's pages from the
//     kernel's page cache, before close(2) or fsync(2) reports the error,
//     so that data the server did not store is never read back through
//     the mount.
//   - Names longer than the server's name_max (PATHCONF at mount, at
//     most 255 bytes) are ENAMETOOLONG.
//   - Silly rename, as Linux NFS: unlinking a file that is open through
//     the mount (with no other link), or renaming over one, renames it to
//     a hidden .nfs<fileid><counter> in its directory, REMOVEd at the
//     last close, so that its descriptors keep working (NFSv3 servers
//     free a file at REMOVE; knfsd answers STALE after). The hidden name
//     shows in listings meanwhile (sillyrename.go). FUSE sends the
//     RELEASE of a closed file after close(2) returned, so an unlink of
//     a file whose every open file was closed waits for those RELEASEs
//     (ReleaseWait) rather than silly-renaming it.
//   - Extended attributes answer ENOTSUP.
//   - fcntl (POSIX) and flock locks go to the server with NLM v4, as
//     Linux NFS sends them (flock as a whole-file lock of the open file),
//     so they are coherent across mounts and hosts; local_lock (nolock)
//     keeps a kind local to the mount. Locks end at close by their owner
//     and when the mount ends (lock.go; client.Locker).
//
// # Memory
//
// Memory per mount is bounded, whatever the applications do:
//
//   - write-behind copies of FUSE write data in flight: at most
//     WriteBehindBytes (8 MiB) per inode and MountWriteBehindBytes (32 MiB)
//     per mount; a write past either waits;
//   - data acknowledged UNSTABLE and kept for a re-send until COMMIT: at
//     most FileUncommittedBytes (16 MiB) per file (client.File commits
//     first), and past MountDirtyBytes (64 MiB) per mount every dirty file
//     is committed in the background (each file's own bound still holds
//     while that runs);
//   - go-fuse's request buffers: MaxBackground + its reader threads, each
//     of MaxWrite (1 MiB) plus a header; READ replies are the request's
//     buffer, at most MaxWrite;
//   - directory listings: one READDIRPLUS reply (dtpref, at most 1 MiB)
//     per open directory stream, kept per directory until the next reply
//     or closedir;
//   - the known names of directories this mount made: at most
//     MaxDirNames (65,536) per directory, dropped past it and with the
//     directory's node;
//   - the access cache: the ACCESS answers of at most MaxAccessCreds (16)
//     credentials per inode (each a key of 8 bytes plus 4 per group, at
//     most 72, and about 60 bytes more), the least recently used dropped
//     past it, all with the inode's node; and the credentials of at most
//     4,096 recent callers (cred.go), forgotten all at once past it;
//   - one small node (handle, attributes, access cache) per inode the
//     kernel remembers, freed by the kernel's FORGET (drop_caches or
//     memory pressure).
//
// Mount.Memory reports what a mount holds against these bounds, and the Go
// heap of its process (`driver mount --metrics-socket` exports it as
// nfsrdma_mount_memory_bytes and friends, see pkg/metrics).
package fusefs
