// Package server is the NFS version 3 (RFC 1813) and MOUNT version 3 (RFC
// 1813 appendix I) export server of nfsrdma-csi: it serves a local directory
// tree, one or more of its directories exported to clients chosen by address
// (CIDR), read-only or read-write.
//
// The server is transport-neutral: Dispatcher returns a sunrpc.Dispatcher
// with both programs registered, which ServeTCP (and an RPC-over-RDMA
// responder) drive. WRITE data is read with sunrpc.Request.Payload and READ
// data is returned with sunrpc.Builder.Payload, so an RDMA transport can
// place both directly (RFC 8267 section 4).
//
// # READ from the page cache
//
// With Options.ReadMapBytes, READ data is a slice of a shared read-only
// mapping of the file (readmap.go): files are mapped in aligned windows of
// ReadMapWindow bytes, kept across READs, least recently used unmapped
// first within the bound, idle ones after 30 s, a removed file's at
// REMOVE/RENAME. TCP writes the record mark and the reply's head, then the
// mapped bytes (writev); RPC-over-RDMA registers them for the Write chunk
// (siw computes the CRC32c over them; a NIC reads them). A mapping is
// coherent with WRITE's pwrite. The size is taken with fstat after the
// window is found and every page is touched under SetPanicOnFault: a file
// truncated below the range faults there (the READ then copies what is
// left, counted as a fault); truncated later, while the reply is sent, the
// kernel's copy fails with EFAULT (TCP) or siw and the RPC-over-RDMA
// responder catch the fault, and the connection is closed instead of
// sending a partial reply: the client retransmits.
//
// # File handles
//
// As NFS-Ganesha's VFS FSAL does, a file handle is the kernel's own handle
// (name_to_handle_at(2)) prefixed by the export: 1 version byte, a 4-byte
// export id (a hash of the export path, so it is stable across restarts),
// the 4-byte kernel handle type and the kernel handle bytes, followed by an
// 8-byte MAC (HMAC-SHA256 under Options.HandleKey) that stops a client from
// relabelling a handle of one export as another's; at most nfs3.FHSize (64)
// bytes in all (25 on ext4). A handle is resolved with open_by_handle_at(2);
// ESTALE becomes NFS3ERR_STALE, a malformed handle or an unknown export id
// or a bad MAC NFS3ERR_BADHANDLE. Every operation then works relative to the
// O_PATH descriptor opened from the handle with *at system calls and
// O_NOFOLLOW / AT_SYMLINK_NOFOLLOW: the server never follows a symbolic link
// and never resolves a path outside the export (LOOKUP of ".." at an export
// root returns the root).
//
// # Identity
//
// The server runs as root but applies each call's AUTH_SYS identity
// explicitly, as the kernel's generic_permission does (owner, group and
// supplementary groups against the mode bits; uid 0 passes all but execute
// on a file with no execute bit), and makes new objects owned by the caller.
// AUTH_NONE calls, and uid 0 on an export with RootSquash, run as
// 65534:65534. As knfsd does, the owner of a file may read and write it
// whatever its mode (the client checked the mode at open).
//
// # Volumes
//
// A volume registry (package volumes, Options.Volumes) adds its volumes'
// exports to the static ones: each volume is the export "/"+path, whose
// client list is the nodes granted (an empty list allows nobody,
// Export.ExplicitClients), each read-write or read-only
// (Export.ReadOnlyClients). Since every file handle carries its export
// id, the list is checked at every call and applies from the next one.
// Every modifying call through a volume's export goes through the
// volume's quota (quota.go, quotaVolume): a WRITE, a SETATTR of the size,
// a MKDIR or a long SYMLINK whose estimated growth does not fit fails
// with NFS3ERR_NOSPC and changes nothing; FSSTAT of a volume reports the
// quota. Package volumes says how usage is kept.
//
// # Limits
//
// Changes made through another export containing a volume (the root
// export the controller uses, say) or by local processes are counted only
// as package volumes says (the next call through the volume touching the
// inode, or a walk of the volume's tree).
//
// As knfsd with no_subtree_check, a handle stays valid for a file that a
// local process moved out of its export. Mount points below an export are
// not crossed (LOOKUP answers NFS3ERR_XDEV); an export must be on the
// root's file system. POSIX ACLs are not evaluated, only mode bits. A
// duplicate request cache (drc.go) answers a retransmitted non-idempotent
// call (REMOVE, RENAME, CREATE, WRITE, ...) with its original's reply, as
// knfsd's does; it keys on the client address without its port (a
// reconnected client comes from a new one), and a retransmission arriving
// while its original executes waits for that reply instead of being
// dropped. Replies are kept 120 s after their last use, 32768 at most. The READDIR cookie
// verifier is the directory's mtime; a zero verifier with a non-zero cookie
// is accepted, as RFC 1813 section 3.3.16 lets a server choose.
package server
