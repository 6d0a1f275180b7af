package fuseuring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring constants of include/uapi/linux/io_uring.h.
const (
	setupSubmitAll    = 1 << 7     // IORING_SETUP_SUBMIT_ALL: submit every SQE even after an error
	setupSQE128       = 1 << 10    // IORING_SETUP_SQE128: 128-byte SQEs (80-byte command area)
	setupSingleIssuer = 1 << 12    // IORING_SETUP_SINGLE_ISSUER: one thread submits
	setupDeferTaskrun = 1 << 13    // IORING_SETUP_DEFER_TASKRUN: task work runs when that thread waits
	enterGetEvents    = 1          // IORING_ENTER_GETEVENTS
	opRead            = 22         // IORING_OP_READ
	featSingleMmap    = 1 << 0     // IORING_FEAT_SINGLE_MMAP
	offSQRing         = 0          // IORING_OFF_SQ_RING
	offCQRing         = 0x8000000  // IORING_OFF_CQ_RING
	offSQEs           = 0x10000000 // IORING_OFF_SQES
	opURingCmd        = 46         // IORING_OP_URING_CMD
	sqeSize           = 128        // with IORING_SETUP_SQE128
	cqeSize           = 16         // struct io_uring_cqe without IORING_SETUP_CQE32
	sqeCmdOffset      = 48         // offset of the command area (sqe->cmd) in an SQE
	sysIOURingSetup   = 425
	sysIOURingEnter   = 426
)

// sqringOffsets is struct io_sqring_offsets.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// params is struct io_uring_params (120 bytes).
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// ring is one io_uring instance with 128-byte SQEs, used by one thread
// (IORING_SETUP_SINGLE_ISSUER): it fills the submission queue and drains
// the completion queue.
type ring struct {
	fd      int
	ringMem []byte // SQ and CQ rings (one mapping, IORING_FEAT_SINGLE_MMAP)
	cqMem   []byte // CQ ring when the kernel maps it apart
	sqes    []byte

	sqHead, sqTail, sqMask *uint32
	sqEntries              uint32
	pending                uint32 // pushed, not yet submitted
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer
}

// newRing sets up an io_uring of entries SQEs (io_uring_setup(2)) and
// maps its rings. Errors are io_uring_setup's and mmap's (ENOSYS: no
// io_uring; EPERM: io_uring disabled by sysctl).
func newRing(entries uint32) (*ring, error) {
	var p params
	p.flags = setupSQE128 | setupSingleIssuer | setupDeferTaskrun | setupSubmitAll
	fd, _, errno := unix.Syscall(sysIOURingSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ring{fd: int(fd), sqEntries: p.sqEntries}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*cqeSize)
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	if r.ringMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap SQ ring: %w", err)
	}
	cq := r.ringMem
	if !single {
		if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			r.close()
			return nil, fmt.Errorf("mmap CQ ring: %w", err)
		}
		cq = r.cqMem
	}
	if r.sqes, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap SQEs: %w", err)
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail, r.sqMask = u32(r.ringMem, p.sqOff.head), u32(r.ringMem, p.sqOff.tail), u32(r.ringMem, p.sqOff.ringMask)
	r.cqHead, r.cqTail, r.cqMask = u32(cq, p.cqOff.head), u32(cq, p.cqOff.tail), u32(cq, p.cqOff.ringMask)
	r.cqes = unsafe.Pointer(&cq[p.cqOff.cqes])
	// The SQ array maps ring slots to SQEs one to one.
	array := unsafe.Slice(u32(r.ringMem, p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	return r, nil
}

// close unmaps the rings and closes the io_uring fd, which cancels what
// is still in flight on it.
func (r *ring) close() {
	for _, m := range [][]byte{r.sqes, r.cqMem, r.ringMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqes, r.cqMem, r.ringMem = nil, nil, nil
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

// cmd is an SQE: a FUSE command for the 80-byte area of an
// IORING_OP_URING_CMD (struct fuse_uring_cmd_req), or a READ.
type cmd struct {
	opcode   uint8  // IORING_OP_URING_CMD or IORING_OP_READ
	op       uint32 // enum fuse_uring_cmd
	fd       int    // the /dev/fuse fd; the fd to read
	addr     uint64 // REGISTER: the struct iovec[2] of the entry; READ: the buffer
	len      uint32 // REGISTER: 2; READ: the buffer's length
	userData uint64 // returned in the CQE
	commitID uint64
	qid      uint16
}

// push queues c in the SQ; io_uring_enter submits it. The ring's one
// thread calls it (IORING_SETUP_SINGLE_ISSUER). It reports false if the
// SQ is full.
func (r *ring) push(c cmd) bool {
	tail := *r.sqTail
	if tail-atomic.LoadUint32(r.sqHead) >= r.sqEntries {
		return false
	}
	idx := tail & *r.sqMask
	sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(sqe)
	sqe[0] = c.opcode
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(c.fd)
	*(*uint32)(unsafe.Pointer(&sqe[8])) = c.op
	*(*uint64)(unsafe.Pointer(&sqe[16])) = c.addr
	*(*uint32)(unsafe.Pointer(&sqe[24])) = c.len
	*(*uint64)(unsafe.Pointer(&sqe[32])) = c.userData
	if c.opcode == opURingCmd {
		putCmdReq(sqe[sqeCmdOffset:], 0, c.commitID, c.qid)
	}
	atomic.StoreUint32(r.sqTail, tail+1)
	r.pending++
	return true
}

// enter submits the pushed SQEs and, with wait, waits for a completion
// (io_uring_enter(2) with IORING_ENTER_GETEVENTS, which also runs the
// ring's deferred task work: the kernel's copies of requests into ring
// entries). EINTR is not an error.
func (r *ring) enter(wait bool) error {
	var minComplete, flags uintptr
	if wait {
		minComplete, flags = 1, enterGetEvents
	}
	n, _, errno := unix.Syscall6(sysIOURingEnter, uintptr(r.fd), uintptr(r.pending), minComplete, flags, 0, 0)
	if errno == 0 || errno == unix.EINTR {
		if errno == 0 {
			r.pending -= uint32(n)
		}
		return nil
	}
	if errno == unix.EAGAIN || errno == unix.EBUSY {
		return nil // no room for completions: the caller reaps, then retries
	}
	return fmt.Errorf("io_uring_enter: %w", errno)
}

// completion is one CQE.
type completion struct {
	userData uint64
	res      int32
}

// reap appends the completions in the CQ to dst and consumes them.
func (r *ring) reap(dst []completion) []completion {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail)
	mask := *r.cqMask
	for ; head != tail; head++ {
		p := unsafe.Add(r.cqes, uintptr(head&mask)*cqeSize)
		dst = append(dst, completion{userData: *(*uint64)(p), res: *(*int32)(unsafe.Add(p, 8))})
	}
	atomic.StoreUint32(r.cqHead, head)
	return dst
}
