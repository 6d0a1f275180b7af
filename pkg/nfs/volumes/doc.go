// Package volumes is the export server's volume registry: directories
// under the served root registered as volumes, each with a quota, a list
// of the nodes granted access and metadata; snapshots and clones of their
// trees; and the RPC-over-RDMA credit grants per machine name. It
// implements admin.Service, which package admin serves over HTTP to the
// CSI controller, and drives the protocol server (package server) through
// the small Exporter interface: the registry hands it the volume exports,
// each carrying its *Volume, and the protocol server calls the Volume's
// quota methods (Write, Truncate, ReserveNew, Charge*, Remove, Sync) for
// every modifying call through a volume's export.
//
// # Quota
//
// A volume has a quota in bytes allocated (st_blocks*512): usage is kept
// per inode, counted by walking the tree at registration, at start and by
// Rescan, then set by every modifying call through the volume's export for
// each inode it touches, so that blocks delayed allocation adds between
// calls are counted once, by the next call (quota.go says how; the
// protocol server answers a call that does not fit NFS3ERR_NOSPC). Calls
// that change one file's allocation
// are serialised per inode (as the kernel's i_rwsem does), and concurrent
// ones reserve their estimate, so pipelined writers cannot pass the quota
// together. Usage passes the quota only by the metadata blocks of the call
// in progress that fills it.
//
// # State, snapshots and clones
//
// The registry is kept in Options.StateDir (state.json, written
// atomically) and restored by New. Snapshots are copies of a volume's tree
// in Options.SnapshotDir (outside the root, never exported), made in the
// background with progress (reflink, else copy_file_range, holes kept);
// clones fill an empty directory from a snapshot or a volume the same way.
// An interrupted copy starts again with the next New. Snapshot copies are
// not atomic: a volume written to while it is copied gives a snapshot of
// no single instant, as with rsync. Extended attributes are not copied.
//
// # Locks
//
// Registry.mu guards the registry; the registry calls the Exporter with it
// held, and the exporter takes only its own locks and never calls back, so
// the order is always registry first, protocol server second. The quota
// methods take a per-inode lock (fileLocks), then the volume's accounting
// lock (acct.mu); they never take Registry.mu, and nothing holding an
// inode lock takes another one.
//
// # Limits
//
// Changes made through another export containing a volume (the root
// export the controller uses, say) or by local processes are counted when
// a call through the volume next touches the inode, or when the volume's
// tree is walked again: when the registry restarts (New counts every
// volume it restores), when AddVolume finds the directory replaced, or
// when Rescan is called. Nothing schedules Rescan: until one of these,
// such changes stay uncounted.
package volumes
