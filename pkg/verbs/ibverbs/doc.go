// Package ibverbs is the hardware verbs provider: the pkg/verbs model over
// rdma-core's libibverbs and librdmacm through cgo, so that pkg/rpcrdma and
// the NFS client run unchanged on InfiniBand, RoCE and iWARP NICs (and on
// the kernel's soft-RoCE rxe and soft-iWARP siw devices).
//
// The provider is built only with the build tag ibverbs (go build -tags
// ibverbs; cgo, libibverbs-dev and librdmacm-dev, linked with -libverbs
// -lrdmacm). Without the tag this package holds only this documentation
// and the default build stays pure Go and static; pkg/verbs/devselect then
// always chooses software iWARP.
//
// # Mapping to libibverbs / librdmacm
//
//   - Device: a context of librdmacm's device list (rdma_get_devices(3)),
//     so that the cm_ids rdma_cm resolves name the same context as the PDs,
//     CQs and QPs made on the Device. Each Device has its own rdma_cm event
//     channel. Open(name, Config), Devices().
//   - CQ: ibv_create_cq(3) with its own completion channel. Poll moves up to
//     64 completions per ibv_poll_cq(3) call (one cgo call per batch, never
//     per byte). Wait arms the CQ (ibv_req_notify_cq(3)), polls once more,
//     and parks the goroutine on the channel's fd, which is non-blocking and
//     registered with the Go runtime's poller (a dup of it): an idle
//     connection costs no CPU and holds no OS thread. The rdma_cm event
//     channel is read the same way.
//   - QP: ibv_create_qp(3), IBV_QPT_RC, moved to INIT at once so receives can
//     be posted before connecting (InfiniBand/RoCE: port 1, P_Key index 0;
//     librdmacm's RTR/RTS attributes come from the resolved route).
//     Connecting and accepting set the cm_id's qp pointer to it, so
//     rdma_connect(3)/rdma_accept(3) drive the QP through RTR and RTS exactly
//     as for a QP made by rdma_create_qp(3). Every send work request is
//     posted signaled and the completions the caller did not ask for are
//     dropped in Poll: send-queue slots are then freed exactly on every
//     device (mlx5 frees unsignaled slots only at a later signaled
//     completion), which the CQ size allows for (2*depth+64).
//     ErrQueueFull is enforced from the provider's own count.
//   - Connection manager: rdma_resolve_addr(3), rdma_resolve_route(3),
//     rdma_connect(3), rdma_listen(3), rdma_accept(3), rdma_reject(3) with
//     private data (InfiniBand CM: at most 56 bytes in a REQ, 196 in a REP,
//     148 in a REJ, padded with zeros; iWARP MPA: up to 512),
//     responder_resources (IRD) and initiator_depth (ORD) clamped to the
//     device's max_qp_rd_atom / max_qp_init_rd_atom. rdma_cm picks the
//     device by the route's local interface; Connect fails with
//     ErrWrongDevice when that is not this Device (two devices on one
//     interface, e.g. siw0 and rxe0 on eth0: the first registered wins).
//
// # Memory registration of Go memory
//
// The model's PD.RegMR takes caller-owned []byte (rpcrdma registers the
// caller's NFS WRITE payload and READ destination per call), so the
// provider registers Go memory in place rather than copying through
// mmap'ed or C memory, which would add a copy per byte and defeat RDMA.
// This is sound because: the Go garbage collector does not move heap
// objects; the region keeps a reference to the slice so the memory is not
// freed while registered; and the first byte is pinned with a
// runtime.Pinner for the registration's lifetime (unpinned by MR.Close),
// which is what the cgo pointer rules require for C (here the kernel and
// the NIC) to keep a Go pointer after the call returns. A []byte passed
// through the verbs.PD interface always escapes to the heap, so it is never
// on a (movable) goroutine stack. The kernel pins the pages
// (ib_umem_get); the Go runtime never returns pages of a live object to
// the OS. The caller must not resize/reallocate the slice while registered
// (the model's rule). ibv_fork_init(3) is not called: Go's os/exec uses
// vfork-style clone, which shares the address space, and Linux >= 5.13
// copies pinned pages on fork anyway.
//
// # STags, Rekey and invalidation
//
// The model's STag is a region's RKey; LKey is ibv_mr.lkey (they may differ
// here). A plain ibv_reg_mr(3) rkey cannot be invalidated on
// InfiniBand/RoCE devices (rxe and mlx5 refuse Local Invalidate and Send
// With Invalidate for user MRs: the QP goes to error), and user space has
// no fast-register work request. So on a device that binds type 2 memory
// windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B: rxe, mlx5) a region with remote
// rights is exposed through a type 2 memory window (ibv_alloc_mw(3)): RKey
// is the window's rkey, bound by an IBV_WR_BIND_MW work request on the
// PD's connected QP (posted at once when the PD has one, else when its
// first QP connects), which the send queue orders before every later work
// request (so before the Send that hands the STag to the peer). Local
// Invalidate and the peer's Send With Invalidate invalidate the window
// (RFC 5040 / IBA o10-37), Rekey invalidates it if still valid and binds
// it again with the consumer key incremented (ibv_inc_rkey(3)): the old
// STag no longer works. Type 2 windows are bound to one QP; a region with
// remote rights must only be used on one connection (rpcrdma uses one PD
// per connection). On devices without type 2 windows (siw, iWARP NICs)
// remote STags are ibv_mr rkeys: iWARP invalidates those (siw does), and
// Rekey registers the memory again (new STag) before deregistering the old
// registration. Config.NoMemoryWindows forces the plain mode; the peer must
// then not be offered Remote Invalidation on InfiniBand/RoCE.
//
// Valid() follows what the provider knows: false after a Local Invalidate
// is posted or a receive completes with IBV_WC_WITH_INV naming the STag.
//
// Registration cache (memory-window mode): since the STag is the window,
// the ibv_mr under it is cached per PD (Config.RegCacheBytes, default 64
// MiB, LRU; registrations of memory inside a cached one, e.g. the next
// chunk of a large buffer or a reused I/O buffer, cost only a window bind,
// no ibv_reg_mr(3)); Device.RegCacheStats counts hits, misses, evictions.
// The cache keeps a reference to (and pins) each array it holds, so cached
// memory is never freed or reused while registered.
//
// # Provider quirks handled (rdma-core 44, Linux 6.1)
//
//   - libsiw sends a Send With Invalidate's STag from wr.rdma.rkey, not
//     invalidate_rkey: both are set.
//   - libsiw has no IBV_WR_LOCAL_INV (EINVAL): on that error the provider
//     emulates Local Invalidate (the region is registered again and the
//     registration named by the STag deregistered, so the STag is dead) and
//     delivers its completion itself through the CQ (which may then precede
//     the completions of earlier requests).
//   - libsiw clears wc_flags: a receive completion does not say that the
//     Send invalidated an STag (the kernel did invalidate it), so WCWithInv
//     is never set on siw and rpcrdma then invalidates locally as well.
//   - rxe reports the kernel's IB_WC_WITH_INVALIDATE bit, which is
//     IBV_WC_IP_CSUM_OK in libibverbs: taken as WITH_INV on a receive with a
//     non-zero invalidated_rkey.
//   - libsiw returns -errno from ibv_post_send/ibv_post_recv, others errno.
//   - iWARP completes an RDMA Write when it is sent; a remote access error
//     reaches the requester as a Terminate (the QP goes to error), not as
//     the Write's completion status.
//
// Asynchronous events (ibv_get_async_event(3)) are read per device context
// the same non-spinning way; QP_FATAL, QP_REQ_ERR and QP_ACCESS_ERR move the
// named QP to the error state.
//
// # Completions and errors
//
// enum ibv_wc_status maps to the model's WCStatus (ibv_poll_cq(3)):
// LOC_LEN_ERR, LOC_PROT_ERR (and MW_BIND_ERR), LOC_QP_OP_ERR, WR_FLUSH_ERR,
// REM_ACCESS_ERR, REM_OP_ERR/REM_INV_REQ_ERR -> WCRemOpErr,
// RETRY_EXC/RNR_RETRY_EXC -> WCFatalErr (ErrTimeout), others WCFatalErr.
// WC.Err wraps the model's sentinel and names ibv_wc_status_str and the
// vendor error. An error completion, a DISCONNECTED or DEVICE_REMOVAL
// rdma_cm event moves the QP to the error state (ibv_modify_qp(3) to ERR,
// which flushes outstanding work), closes Done and sets Err. RDMA Read
// completions report the requested length as ByteLen (libibverbs does not
// define byte_len for them).
package ibverbs
