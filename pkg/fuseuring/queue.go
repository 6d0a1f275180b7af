package fuseuring

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// entrySlot is the bytes of an entry before its payload buffer: the
// fuse_uring_req_header, then the struct iovec[2] of its REGISTER.
const entrySlot = 4096

// wakeTag is the user_data of the queue's READ of its eventfd.
const wakeTag = ^uint64(0)

// queue is one ring queue (qid): an io_uring whose URING_CMDs hold the
// queue's entries, owned by one OS thread. The kernel queues a caller's
// request on the queue of the CPU it runs on (fs/fuse/dev_uring.c,
// fuse_uring_task_to_queue) and copies it into an entry in task work of
// the thread that submitted the entry's last command; that thread must
// never wait for an answer from this server (a caller of the mount in
// this process would wait for itself), so the queue's thread is locked
// to it and only serves requests.
type queue struct {
	s    *Server
	qid  uint16
	r    *ring
	mem  []byte // a control page (the eventfd's buffer), then the entries
	ents []entry
	efd  int // eventfd: requests answered by goroutines, or stop

	mu       sync.Mutex
	done     []answered // guarded by mu
	notified atomic.Bool
	quit     atomic.Bool // set before the wake that ends the thread
}

// answered is an entry whose reply a goroutine wrote.
type answered struct {
	idx      int
	commitID uint64
}

// entry is one ring entry: the buffers the kernel copies a request into
// and the reply out of.
type entry struct {
	idx     int
	hdr     []byte // struct fuse_uring_req_header
	payload []byte
}

// possibleCPUs returns the kernel's number of possible CPUs
// (/sys/devices/system/cpu/possible, "0-N"), the number of queues a FUSE
// ring has; runtime.NumCPU if it cannot be read.
func possibleCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return runtime.NumCPU()
		}
		n = max(n, z+1)
	}
	return n
}

// payloadSize is the payload buffer of an entry: at least the kernel's
// ring->max_payload_sz, the largest of FUSE_MIN_READ_BUFFER (8 KiB),
// max_write and max_pages pages (fs/fuse/dev_uring.c, fuse_uring_create).
func payloadSize(maxWrite int) int {
	page := os.Getpagesize()
	return max(8192, (maxWrite+page-1)/page*page)
}

// startRing starts one queue per possible CPU, each registering its
// entries from its own thread; the kernel moves requests to the ring
// once every queue has one. An error stops the queues started.
func (s *Server) startRing() error {
	n := possibleCPUs()
	if n > 1<<16 {
		return fmt.Errorf("%d CPUs", n)
	}
	for qid := range n {
		q, err := s.newQueue(uint16(qid))
		if err != nil {
			s.stopQueues()
			return err
		}
		ready := make(chan error, 1)
		s.threads.Add(1)
		go q.run(ready)
		if err := <-ready; err != nil {
			q.release()
			s.stopQueues()
			return fmt.Errorf("queue %d: %w", qid, err)
		}
		s.qmu.Lock()
		s.queues = append(s.queues, q)
		s.qmu.Unlock()
	}
	return nil
}

// stopQueues ends the queues of a ring that failed to set up.
func (s *Server) stopQueues() {
	s.qmu.Lock()
	qs := s.queues
	s.queues = nil
	s.qmu.Unlock()
	for _, q := range qs {
		q.quit.Store(true)
		q.wake()
	}
	s.threads.Wait()
	for _, q := range qs {
		q.release()
	}
}

func (q *queue) slot() int { return entrySlot + payloadSize(q.s.opts.MaxWrite) }

// newQueue maps the entries' buffers and opens the queue's eventfd.
func (s *Server) newQueue(qid uint16) (*queue, error) {
	q := &queue{s: s, qid: qid, efd: -1}
	slot := q.slot()
	var err error
	q.mem, err = unix.Mmap(-1, 0, entrySlot+slot*s.cfg.Entries, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap ring entries: %w", err)
	}
	if q.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		q.release()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	q.ents = make([]entry, s.cfg.Entries)
	for i := range q.ents {
		base := entrySlot + i*slot
		q.ents[i] = entry{idx: i, hdr: q.mem[base : base+headerSize], payload: q.mem[base+entrySlot : base+slot]}
	}
	return q, nil
}

// release closes the eventfd and unmaps the buffers, once the queue's
// thread ended and no goroutine answers a request of the queue.
func (q *queue) release() {
	if q.efd >= 0 {
		_ = unix.Close(q.efd)
		q.efd = -1
	}
	if q.mem != nil {
		_ = unix.Munmap(q.mem)
		q.mem = nil
	}
}

// wake makes the queue's thread look at its answered entries and at the
// server's stop (eventfd write).
func (q *queue) wake() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(q.efd, one[:])
}

// run is the queue's thread: it sets up the io_uring, registers the
// entries, reports on ready, then serves until the server stops. The
// thread is never unlocked, so it ends with the goroutine: no other code
// ever runs on a thread that task work of the ring may target.
func (q *queue) run(ready chan<- error) {
	defer q.s.threads.Done()
	runtime.LockOSThread()
	defer enterQueueThread()()
	var cpus unix.CPUSet
	cpus.Set(int(q.qid))
	_ = unix.SchedSetaffinity(0, &cpus) // near the callers the kernel queues here; best effort
	r, err := newRing(uint32(len(q.ents) + 1))
	if err != nil {
		ready <- err
		return
	}
	q.r = r
	defer r.close()
	for i := range q.ents {
		e := &q.ents[i]
		iov := (*[2]unix.Iovec)(unsafe.Pointer(&q.mem[entrySlot+i*q.slot()+headerSize]))
		iov[0].Base, iov[0].Len = &e.hdr[0], uint64(len(e.hdr))
		iov[1].Base, iov[1].Len = &e.payload[0], uint64(len(e.payload))
		r.push(cmd{opcode: opURingCmd, op: cmdRegister, fd: q.s.fd, addr: uint64(uintptr(unsafe.Pointer(iov))), len: 2, userData: uint64(i), qid: q.qid})
	}
	q.armWake()
	if err := r.enter(false); err != nil {
		ready <- err
		return
	}
	// A REGISTER the kernel refused completes at once with its error.
	cs := r.reap(nil)
	for _, c := range cs {
		if c.userData != wakeTag && c.res < 0 {
			ready <- fmt.Errorf("register entry %d: %w", c.userData, unix.Errno(-c.res))
			return
		}
	}
	ready <- nil
	q.loop(cs)
}

// armWake queues the READ of the eventfd.
func (q *queue) armWake() {
	q.r.push(cmd{opcode: opRead, fd: q.efd, addr: uint64(uintptr(unsafe.Pointer(&q.mem[0]))), len: 8, userData: wakeTag})
}

// loop serves completions: a request in an entry is answered on this
// thread, then committed with the next wait in one io_uring_enter,
// unless it may take long (offload) or more requests came with it; those
// are answered by goroutines, which hand their entries back through the
// eventfd for the COMMIT.
func (q *queue) loop(cs []completion) {
	for {
		last := -1
		for i, c := range cs {
			if c.userData != wakeTag && c.res >= 0 && c.userData < uint64(len(q.ents)) {
				last = i
			}
		}
		stop := false
		for i, c := range cs {
			switch {
			case c.userData == wakeTag:
				if stop = q.quit.Load(); !stop {
					q.armWake()
				}
				q.commitAnswered()
			case c.userData >= uint64(len(q.ents)):
			case c.res < 0:
				// the entry left the ring: the connection ended
				// (ENOTCONN) or the ring was torn down
			default:
				e := &q.ents[c.userData]
				if i != last || q.offload(binary.LittleEndian.Uint32(e.hdr[4:])) {
					q.s.serving.Add(1)
					q.s.offloaded.Add(1)
					go q.serveAsync(e)
					continue
				}
				q.commit(e, q.s.answer(e))
			}
		}
		if stop {
			_ = q.r.enter(false)
			return
		}
		if err := q.r.enter(true); err != nil {
			q.s.opts.Logger.Printf("fuseuring: queue %d: %v", q.qid, err)
			return
		}
		cs = q.r.reap(cs[:0])
	}
}

// offload reports whether a request of opcode goes to a goroutine: lock
// waits (SETLKW), which last until another caller unlocks, perhaps
// through this very queue, and whatever Config.Inline does not take. A
// hand-off to a goroutine and back costs a goroutine start, an eventfd
// write and a wake-up of the queue's thread: with FLUSH and RELEASE
// handed off, create+close took a third longer than over /dev/fuse
// (BenchmarkFUSEMetadata in pkg/nfs/fusefs).
func (q *queue) offload(opcode uint32) bool {
	return opcode == opSetLkW || q.s.cfg.Inline == nil || !q.s.cfg.Inline(opcode)
}

// commit queues e's COMMIT_AND_FETCH.
func (q *queue) commit(e *entry, commitID uint64) {
	q.r.push(cmd{opcode: opURingCmd, op: cmdCommitAndFetch, fd: q.s.fd, userData: uint64(e.idx), commitID: commitID, qid: q.qid})
}

// commitAnswered commits the entries goroutines answered.
func (q *queue) commitAnswered() {
	q.notified.Store(false)
	q.mu.Lock()
	done := q.done
	q.done = nil
	q.mu.Unlock()
	for _, a := range done {
		q.commit(&q.ents[a.idx], a.commitID)
	}
}

// serveAsync answers e in a goroutine and hands it back to the queue's
// thread.
func (q *queue) serveAsync(e *entry) {
	defer q.s.serving.Done()
	id := q.s.answer(e)
	q.mu.Lock()
	q.done = append(q.done, answered{idx: e.idx, commitID: id})
	q.mu.Unlock()
	if q.notified.CompareAndSwap(false, true) {
		q.wake()
	}
}

// answer answers the request in e with go-fuse's ProtocolServer, writing
// the reply into e, and returns the commit ID.
func (s *Server) answer(e *entry) uint64 {
	s.ringReqs.Add(1)
	req, err := parseEntry(e.hdr, len(e.payload))
	if err != nil {
		s.opts.Logger.Printf("fuseuring: entry %d: %v", e.idx, err)
		putErrorReply(e.hdr, binary.LittleEndian.Uint64(e.hdr[8:]), int32(unix.EIO))
		return binary.LittleEndian.Uint64(e.hdr[entInOutOff+8:])
	}
	in := [][]byte{e.hdr[:inHeaderSize], e.hdr[inOutSize : inOutSize+req.opLen], e.payload[:req.payloadLen]}
	out := [][]byte{e.hdr[:outHdrSize], e.payload}
	n, st := s.ps.HandleRequest(in, out)
	switch {
	case !st.Ok():
		putErrorReply(e.hdr, req.unique, int32(st))
	case n < outHdrSize:
		// go-fuse answers nothing (FORGET, INTERRUPT), which the ring
		// never carries; the entry still needs its commit
		putErrorReply(e.hdr, req.unique, int32(fuse.ENOSYS))
	default:
		putReplySize(e.hdr, n-outHdrSize)
	}
	return req.commitID
}
