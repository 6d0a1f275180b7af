package server

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Defaults of the duplicate request cache.
const (
	// DefaultDRCEntries bounds the replies the duplicate request cache
	// holds. A cached reply is at most about 300 bytes (a CREATE result
	// with handle, attributes and wcc_data), so the default costs at most
	// about 16 MiB with the bookkeeping.
	DefaultDRCEntries = 32768
	// DefaultDRCExpiry is how long a reply stays cached after it was
	// last used: knfsd's RC_EXPIRE (fs/nfsd/cache.h, 120 s).
	DefaultDRCExpiry = 120 * time.Second
	// drcCsumLen is how many leading bytes of the arguments go into the
	// key's checksum: knfsd's RC_CSUMLEN (256).
	drcCsumLen = 256
	// drcFreeMax bounds the recycled entries kept for reuse.
	drcFreeMax = 64
)

// drcProcs are the NFSv3 procedures whose replies the cache keeps: those
// knfsd marks RC_REPLBUFF in nfsd_procedures3 (fs/nfsd/nfs3proc.c). They
// change the file system, so that running a retransmission again gives a
// wrong answer (REMOVE, RMDIR, RENAME: NFS3ERR_NOENT; CREATE guarded,
// MKDIR, SYMLINK, MKNOD, LINK: NFS3ERR_EXIST; SETATTR guarded:
// NFS3ERR_NOT_SYNC) or undoes a later change (WRITE replayed over a newer
// WRITE of the same range, SETATTR over a newer SETATTR). The others
// (GETATTR, LOOKUP, ACCESS, READLINK, READ, READDIR, READDIRPLUS, FSSTAT,
// FSINFO, PATHCONF, COMMIT; RC_NOCACHE) are idempotent and simply run
// again; among them are all the procedures whose results go in a Write or
// Reply chunk over RPC-over-RDMA (RFC 8267 section 4), so no cached reply
// ever carries a DDP-eligible item.
var drcProcs = [nfs3.NumProcs]bool{
	nfs3.ProcSetattr: true, nfs3.ProcWrite: true, nfs3.ProcCreate: true,
	nfs3.ProcMkdir: true, nfs3.ProcSymlink: true, nfs3.ProcMknod: true,
	nfs3.ProcRemove: true, nfs3.ProcRmdir: true, nfs3.ProcRename: true,
	nfs3.ProcLink: true,
}

// DRCStats are the counters of the duplicate request cache since the
// server started, for metrics.
type DRCStats struct {
	// Hits counts retransmissions answered with the cached reply of their
	// original (knfsd's RC_REPLY), including those that waited for it.
	Hits uint64
	// InProgress counts retransmissions that arrived while their original
	// was still executing (knfsd drops them: RC_DROPIT); here each waits
	// for the original and is then answered like a hit, or gets no reply
	// when its connection ends first (see replyCache).
	InProgress uint64
	// Misses counts calls of cached procedures that were executed
	// (RC_DOIT): first transmissions, and retransmissions whose entry had
	// expired or been evicted.
	Misses uint64
	// Evictions counts replies dropped by the size bound before they
	// expired; Expired those dropped after the expiry unused.
	Evictions, Expired uint64
	// Entries and Bytes are the replies held now and their size in bytes
	// (the NFS results, without the RPC reply header); Pending the cached
	// procedures executing now.
	Entries, Bytes, Pending int
}

// drcConfig configures a replyCache; zero fields take the defaults.
type drcConfig struct {
	MaxEntries int              // DefaultDRCEntries
	Expiry     time.Duration    // DefaultDRCExpiry
	Now        func() time.Time // time.Now (tests pass a fake clock)
}

// replyCache is the duplicate request cache (DRC) of the NFS program, as
// Linux knfsd's (fs/nfsd/nfscache.c, after Juszczak, "Improving the
// Performance and Correctness of an NFS Server", USENIX Winter 1989).
// Clients retransmit a call with its XID unchanged when no reply came:
// after a timeout, and after a reconnect (sunrpc.Client; over RPC-over-RDMA
// always on a new connection, as Linux xprtrdma does). When the first
// transmission was executed and only its reply was lost, executing a
// non-idempotent procedure (drcProcs) again gives the application an error
// for an operation that succeeded. The cache keeps the reply of every call
// of those procedures and answers a retransmission with it.
//
// # Key
//
// A call is a retransmission of an earlier one when these are equal:
//
//   - the client's IP address, without the port;
//   - the transport ("tcp", "rdma": knfsd's k_prot), the XID, the NFS
//     version and procedure;
//   - the length of the arguments in bytes, as XDR (a DDP-eligible
//     argument pulled from a Read chunk counted with its pad);
//   - a 64-bit checksum (hash/maphash, seeded at random per cache) of the
//     credential's identity (flavor; for AUTH_SYS the machine name, uid and
//     gid, not the stamp, which a client may renew when it re-encodes a
//     call) and of the first 256 bytes of the inline arguments and of a
//     pulled DDP-eligible argument (knfsd's RC_CSUMLEN): this tells a new
//     call that happens to reuse an XID from a retransmission.
//
// knfsd keys on address and port, which suits Linux clients over TCP: they
// bind the same source port again when they reconnect (xprtsock), so that
// the DRC recognises their retransmissions. Our clients do not: a TCP
// reconnect (sunrpc.DialTCP) and every RPC-over-RDMA connection (whose
// connection manager picks the port, as the kernel's RDMA CM does for
// Linux xprtrdma) come from a new ephemeral port, and both transports hand
// the dispatcher that address with its port as Request.Peer (ServeTCPConn:
// the socket's remote address; the rpcrdma responder: the connection
// request's). A key with the port would miss
// exactly the retransmissions the cache exists for, so the port is left
// out.
//
// Without the port, calls of different clients on one host (the pods of a
// node, each with its own mount and connection) share the address, and
// collisions are still not a practical concern. A false hit needs another
// client of the same host, within the expiry, to send the same procedure
// with the same XID, argument length, credential identity and leading
// argument bytes (which hold the file handle and, for the namespace
// procedures, the name), or a 64-bit checksum collision (odds of 2^-64 per
// pair of calls, and not steerable: the seed is secret). Each client
// starts its XIDs at a random 32-bit value and counts up, so two clients
// making R calls each within the expiry use a common XID with odds of
// about 2R/2^32 (1 in 20 000 for R = 100 000); the same XID must then
// carry the same operation on the same object, and the replayed reply is
// the answer to that very operation. A client reuses its own XIDs only
// after 2^32 calls: 71 minutes at a million calls per second, far beyond
// the expiry.
//
// # Life of an entry
//
// The first transmission inserts an in-progress entry and executes. A
// reply with SUCCESS is kept (its NFS results, copied; NFS errors such as
// NFS3ERR_NOENT included, since a retransmission must get the same answer);
// a call that failed at the RPC level (GARBAGE_ARGS, SYSTEM_ERR, a call
// dropped because the server is stopping) leaves no entry, and a
// retransmission executes again, as knfsd does (RC_NOCACHE). A kept reply
// is replayed after the dispatcher's reply header, through the normal
// Builder, so the replay goes through the retransmission's own transport
// as any reply does: over RPC-over-RDMA, the RPC-over-RDMA header (credits,
// and a Reply chunk if the new call offered one and needs it) is the new
// call's, never the old one's.
//
// A retransmission that arrives while its original is still executing
// waits for the original to end, then takes its reply (or executes, if the
// original left no entry), or gives up without a reply when its own
// connection ends or the server stops. knfsd drops such a call instead
// (RC_DROPIT), to free a server thread; here a waiting call costs a
// goroutine and keeps its connection's slot (an RPC-over-RDMA credit, one
// of TCP's concurrent calls), and it is answered as soon as the original
// is done rather than after the client's next timeout; over RPC-over-RDMA,
// where a requester retransmits only after reconnecting, a dropped call
// would cost a whole timeout and reconnection more. The waiters are bounded
// by the transports' limits on calls in progress per connection.
//
// Kept replies are in least-recently-used order; a hit refreshes one (as
// knfsd's lru_put_end). A reply not used for the expiry (DefaultDRCExpiry,
// knfsd's 120 s) is never replayed, and is dropped when the next reply is
// kept; when more than the maximum number of replies are held
// (DefaultDRCEntries), the least recently used goes first. Entries in
// progress are never evicted; they are bounded by the calls in progress.
//
// A nil *replyCache caches nothing.
type replyCache struct {
	maxEntries int
	expiry     time.Duration
	now        func() time.Time
	seed       maphash.Seed

	mu      sync.Mutex
	m       map[drcKey]*drcEntry // done and in-progress entries
	lru     drcEntry             // sentinel of the done entries: lru.next newest, lru.prev oldest
	free    []*drcEntry
	entries int // done entries (in lru)
	bytes   int // sum of their len(reply)
	pending int // in-progress entries

	hits, inProgress, misses, evictions, expired uint64
}

// drcKey identifies a call: see replyCache.
type drcKey struct {
	addr      netip.Addr
	transport string
	xid       uint32
	vers      uint32
	proc      uint32
	argLen    uint32
	sum       uint64
}

// drcEntry is one call: in progress (!done), or done with its reply.
type drcEntry struct {
	key        drcKey
	prev, next *drcEntry // in lru, when done
	done       bool
	at         time.Time     // when done: completion or last hit
	reply      []byte        // when done: the NFS results after the reply header
	wait       chan struct{} // made by the first waiter; closed when the execution ends
}

// newReplyCache returns an empty cache configured by cfg.
func newReplyCache(cfg drcConfig) *replyCache {
	c := &replyCache{
		maxEntries: cfg.MaxEntries,
		expiry:     cfg.Expiry,
		now:        cfg.Now,
		seed:       maphash.MakeSeed(),
		m:          make(map[drcKey]*drcEntry),
	}
	if c.maxEntries <= 0 {
		c.maxEntries = DefaultDRCEntries
	}
	if c.expiry <= 0 {
		c.expiry = DefaultDRCExpiry
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// Stats returns the cache's counters; zero for a nil cache.
func (c *replyCache) Stats() DRCStats {
	if c == nil {
		return DRCStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return DRCStats{
		Hits: c.hits, InProgress: c.inProgress, Misses: c.misses,
		Evictions: c.evictions, Expired: c.expired,
		Entries: c.entries, Bytes: c.bytes, Pending: c.pending,
	}
}

// wrap returns h behind the cache when proc is one of drcProcs, h itself
// otherwise (and for a nil cache).
func (c *replyCache) wrap(proc uint32, h sunrpc.Handler) sunrpc.Handler {
	if c == nil || proc >= nfs3.NumProcs || !drcProcs[proc] {
		return h
	}
	return func(ctx context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		k := c.key(req)
		counted := false
		for {
			e, wait, replied := c.begin(k, b, !counted)
			if replied {
				if v := klog.V(4); v.Enabled() {
					v.InfoS("nfs: retransmission answered from the duplicate request cache",
						"proc", nfs3.ProcName(req.Proc), "xid", req.XID, "peer", req.Peer, "transport", req.Transport)
				}
				return nil
			}
			if e != nil {
				return c.execute(ctx, e, h, req, b)
			}
			counted = true
			select {
			case <-wait:
			case <-ctx.Done():
				// The retransmission's connection ended or the server is
				// stopping: the dispatcher drops the call, and the client
				// retransmits again.
				return ctx.Err()
			}
		}
	}
}

// execute runs h for the call of in-progress entry e and completes e with
// the results h encoded into b, or removes e when h failed or panicked.
func (c *replyCache) execute(ctx context.Context, e *drcEntry, h sunrpc.Handler, req *sunrpc.Request, b *sunrpc.Builder) error {
	start := b.Len()
	kept := false
	defer func() {
		if !kept {
			c.abandon(e)
		}
	}()
	err := h(ctx, req, b)
	if err == nil && !b.HasPayload() {
		c.complete(e, b.Bytes()[start:])
		kept = true
	}
	return err
}

// key computes the key of req (see replyCache).
func (c *replyCache) key(req *sunrpc.Request) drcKey {
	var h maphash.Hash
	h.SetSeed(c.seed)
	var w [12]byte
	binary.BigEndian.PutUint32(w[0:], uint32(req.Cred.Flavor))
	if req.Cred.Flavor == sunrpc.AuthSys {
		binary.BigEndian.PutUint32(w[4:], req.Cred.Sys.UID)
		binary.BigEndian.PutUint32(w[8:], req.Cred.Sys.GID)
		h.Write(w[:])
		h.WriteString(req.Cred.Sys.MachineName)
	} else {
		h.Write(w[:4])
	}
	a := req.Args
	h.Write(a[:min(len(a), drcCsumLen)])
	n := len(a)
	if p := req.ArgPayload; p != nil {
		h.Write(p[:min(len(p), drcCsumLen)])
		n += xdr.RoundUp(len(p))
	}
	if v := req.ArgPayloadVec; v != nil {
		left := drcCsumLen
		for _, p := range v {
			h.Write(p[:min(len(p), left)])
			left -= min(len(p), left)
		}
		n += xdr.RoundUp(req.ArgPayloadLen())
	}
	return drcKey{
		addr: peerAddr(req.Peer), transport: req.Transport,
		xid: req.XID, vers: req.Vers, proc: req.Proc,
		argLen: uint32(n), sum: h.Sum64(),
	}
}

// begin looks k up. For a new call (or an expired entry) it inserts an
// in-progress entry and returns it: the caller executes. For a done entry
// it appends the cached reply to b and returns replied. For an entry in
// progress it returns the channel that is closed when that execution ends;
// countWait says whether to count the call in InProgress.
func (c *replyCache) begin(k drcKey, b *sunrpc.Builder, countWait bool) (e *drcEntry, wait <-chan struct{}, replied bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	e = c.m[k]
	if e != nil && e.done && now.Sub(e.at) >= c.expiry {
		c.expired++
		c.remove(e)
		e = nil
	}
	switch {
	case e == nil:
		e = c.alloc()
		e.key = k
		c.m[k] = e
		c.pending++
		c.misses++
		return e, nil, false
	case e.done:
		c.hits++
		b.Fixed(e.reply) // XDR results: a multiple of 4 bytes, no pad added
		e.at = now
		c.unlink(e)
		c.pushFront(e)
		return nil, nil, true
	}
	if countWait {
		c.inProgress++
	}
	if e.wait == nil {
		e.wait = make(chan struct{})
	}
	return nil, e.wait, false
}

// complete makes in-progress entry e done with a copy of reply, wakes its
// waiters, and drops expired replies and those over the bound.
func (c *replyCache) complete(e *drcEntry, reply []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.pending--
	e.reply = append(e.reply[:0], reply...)
	e.done, e.at = true, now
	c.pushFront(e)
	c.entries++
	c.bytes += len(e.reply)
	c.wake(e)
	for t := c.lru.prev; t != &c.lru; t = c.lru.prev {
		switch {
		case now.Sub(t.at) >= c.expiry:
			c.expired++
		case c.entries > c.maxEntries:
			c.evictions++
		default:
			return
		}
		c.remove(t)
	}
}

// abandon removes in-progress entry e, whose execution left no reply to
// keep, and wakes its waiters (which execute the call themselves).
func (c *replyCache) abandon(e *drcEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending--
	delete(c.m, e.key)
	c.wake(e)
	c.recycle(e)
}

// wake closes e's wait channel, if a waiter made one. c.mu is held.
func (c *replyCache) wake(e *drcEntry) {
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
}

// remove drops done entry e. c.mu is held.
func (c *replyCache) remove(e *drcEntry) {
	delete(c.m, e.key)
	c.unlink(e)
	c.entries--
	c.bytes -= len(e.reply)
	c.recycle(e)
}

// alloc returns a cleared entry, recycled when one is free (keeping its
// reply buffer). c.mu is held.
func (c *replyCache) alloc() *drcEntry {
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		return e
	}
	return new(drcEntry)
}

// recycle keeps e for alloc. c.mu is held; e is in neither m nor lru.
func (c *replyCache) recycle(e *drcEntry) {
	*e = drcEntry{reply: e.reply[:0]}
	if len(c.free) < drcFreeMax {
		c.free = append(c.free, e)
	}
}

func (c *replyCache) pushFront(e *drcEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

func (c *replyCache) unlink(e *drcEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}
