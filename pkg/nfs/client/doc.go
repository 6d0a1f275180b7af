// Package client is a user-space NFSv3 client (RFC 1813) over any
// sunrpc transport: its own TCP record marking, or RPC-over-RDMA
// (RFC 8166 and version 2, bound to NFSv3 by RFC 8267) through
// Options.Dial (a sunrpc.DialFunc, such as rpcrdma.Dialer; package
// transport makes it from a mount's options).
//
// Mount does what mount.nfs does for "vers=3": it resolves ports through
// rpcbind when they are not given (portmap v2 GETPORT over TCP), calls
// MOUNT v3 MNT over TCP (RFC 8267 section 5.1: MOUNT never uses RDMA), then
// FSINFO on the root handle to size READ and WRITE. The returned *Client
// has one method per NFSv3 procedure (RFC 1813 section 3.3), each taking a
// context and returning the decoded result, post-op attributes included,
// also when the server answered with an error status.
//
// # Errors
//
// An NFS error status is returned as an error wrapping the nfs3.Status, so
// errors.Is(err, nfs3.ErrNoEnt), errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, syscall.ENOENT) all work. RPC-level failures wrap the
// sunrpc errors (sunrpc.ErrTimeout, sunrpc.ErrProgUnavail, ...) or ctx's
// error. NFS3ERR_JUKEBOX is retried after Options.JukeboxDelay until ctx
// ends, as Linux does (fs/nfs/nfs3proc.c nfs3_rpc_wrapper).
//
// # Data placement
//
// WRITE data and the SYMLINK path are passed as the DDP-eligible payload of
// the call (sunrpc.Builder.Payload): never copied by this package. READ and
// READLINK give the transport the caller's buffer (CallSpec.ReplyPayload):
// an RDMA transport places the data there (a Write chunk); the TCP
// transport reads it from the socket straight into it, located with
// CallSpec.LocateReplyPayload (nfs3.LocateDDPResult), as Linux's xprtsock
// reads into the page cache. Only a reply that is not one record fragment
// (no server this project knows sends those) is read whole and its data
// copied once into the caller's buffer. Every call sets
// CallSpec.MaxReplySize from nfs3.MaxResultSize (plus the largest RPC
// reply header) so that an RDMA transport can decide on a Reply chunk.
//
// # File-level helpers
//
// ReadAt splits a read into rsize READs issued concurrently (at most
// Options.Window at once). File.WriteAt sends UNSTABLE WRITEs of at most
// wsize, pipelined the same way, and keeps each write's data until a
// COMMIT with the same write verifier covers it (File.Commit re-sends
// what a server reboot lost). Readdirplus iterates a directory with
// cookie/cookieverf handling. LookupPath walks a slash-separated path.
//
// # Connections
//
// Options.NConnect (nfs(5) nconnect=N, 1..MaxNConnect) opens N
// connections to the NFS service, each dialed with Options.Dial (TCP or
// RPC-over-RDMA) when first used, and spreads the NFS calls over them
// round-robin, one pick per call, as Linux's xprt switch does
// (net/sunrpc/xprtmultipath.c). MOUNT, NLM and NSM keep one TCP
// connection each. A connection whose transport ended is skipped by new
// calls while another one is up; the calls it carried are retransmitted
// with their XID on its next transport (sunrpc.RetryPolicy), so losing a
// connection fails no call while the server accepts connections. The
// server's duplicate request cache keys a call by client address without
// the port, transport, XID and a checksum of the arguments (package
// server, drc.go), so it recognises a retransmission on any connection of
// the set; Linux knfsd keys by address and port and would miss it, as it
// misses a retransmission after any reconnect from another port.
//
// Over RPC-over-RDMA a pod's credit grant stays one grant: the export
// server accounts the connections of one AUTH_SYS machine name together
// (the grant divided among them, at least 1 each; package rpcrdma,
// grants.go), and the requester asks credits/N per connection, at least
// 1 (package transport), so that a server without such accounting sees
// the pod ask for no more than its grant in total.
//
// # Locks
//
// Client.Locks is the mount's NLM v4 client (X/Open XNFS chapter 14, over
// TCP as RFC 8267 section 5.1 asks), modelled on Linux lockd's client
// (fs/lockd/clntproc.c): TEST, LOCK, CANCEL and UNLOCK of byte ranges of
// an owner, each owner with its svid (its pid when free) and oh. A
// blocking LOCK answered NLM4_BLOCKED completes on the server's GRANTED
// callback, served by this process's callback service (callbacks.go,
// registered with the local rpcbind when it can be), or by re-sending the
// LOCK every LockOptions.Poll. The held locks are kept (posixlock sets)
// to be released at Close and reclaimed after the server restarts
// (SM_NOTIFY, or a call refused for its grace period). HostState keeps
// this host's NSM state and notifies servers after a reboot.
//
// Logging uses k8s.io/klog/v2: the transport and the negotiated sizes at
// V(1), each retried JUKEBOX and each write re-sent after a verifier change
// at V(2).
package client
