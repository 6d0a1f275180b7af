package fuseuring

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// entrySlot is the bytes of an entry before its payload buffer: the
// fuse_uring_req_header, then the struct iovec[2] of its REGISTER.
const entrySlot = 4096

// queue is one ring queue (qid): an io_uring whose URING_CMDs hold the
// queue's entries. The kernel queues a caller's request on the queue of
// the CPU it runs on (fs/fuse/dev_uring.c, fuse_uring_task_to_queue).
type queue struct {
	s    *Server
	qid  uint16
	r    *ring
	file *os.File // the io_uring fd, in Go's poller: readable when CQEs wait
	mem  []byte   // the entries' header and payload buffers
	ents []entry
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

// startRing sets up one queue per possible CPU and registers their
// entries; the kernel moves requests to the ring once every queue has
// one.
func (s *Server) startRing() error {
	n := possibleCPUs()
	if n > 1<<16 {
		return fmt.Errorf("%d CPUs", n)
	}
	for qid := range n {
		q, err := s.newQueue(uint16(qid))
		if err != nil {
			s.closeQueues()
			return err
		}
		s.queues = append(s.queues, q)
	}
	for _, q := range s.queues {
		for i := range q.ents {
			e := &q.ents[i]
			iov := (*[2]unix.Iovec)(unsafe.Pointer(&q.mem[i*q.slot()+headerSize]))
			iov[0].Base, iov[0].Len = &e.hdr[0], uint64(len(e.hdr))
			iov[1].Base, iov[1].Len = &e.payload[0], uint64(len(e.payload))
			c := cmd{op: cmdRegister, fd: s.fd, addr: uint64(uintptr(unsafe.Pointer(iov))), len: 2, userData: uint64(i), qid: q.qid}
			if err := q.r.submit(c); err != nil {
				s.closeQueues()
				return fmt.Errorf("register entry %d of queue %d: %w", i, q.qid, err)
			}
		}
	}
	// A REGISTER the kernel refused completes at once with its error.
	for _, q := range s.queues {
		cs := q.r.reap(nil)
		for _, c := range cs {
			if c.res < 0 {
				s.closeQueues()
				return fmt.Errorf("register entry %d of queue %d: %w", c.userData, q.qid, unix.Errno(-c.res))
			}
		}
		q.dispatch(cs)
	}
	for _, q := range s.queues {
		s.loops.Add(1)
		go q.reapLoop()
	}
	return nil
}

// closeQueues releases the queues of a ring that failed to set up.
func (s *Server) closeQueues() {
	for _, q := range s.queues {
		q.close()
	}
	s.queues = nil
}

func (q *queue) slot() int { return entrySlot + payloadSize(q.s.opts.MaxWrite) }

// newQueue maps the entries' buffers and sets up the queue's io_uring.
func (s *Server) newQueue(qid uint16) (*queue, error) {
	q := &queue{s: s, qid: qid}
	r, err := newRing(uint32(s.cfg.Entries))
	if err != nil {
		return nil, err
	}
	q.r = r
	if err := unix.SetNonblock(r.fd, true); err != nil {
		r.close()
		return nil, err
	}
	q.file = os.NewFile(uintptr(r.fd), "io_uring")
	slot := q.slot()
	q.mem, err = unix.Mmap(-1, 0, slot*s.cfg.Entries, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		q.close()
		return nil, fmt.Errorf("mmap ring entries: %w", err)
	}
	q.ents = make([]entry, s.cfg.Entries)
	for i := range q.ents {
		base := i * slot
		q.ents[i] = entry{idx: i, hdr: q.mem[base : base+headerSize], payload: q.mem[base+entrySlot : base+slot]}
	}
	return q, nil
}

// close releases the io_uring (cancelling its commands) and the buffers.
func (q *queue) close() {
	if q.file != nil {
		_ = q.file.Close()
		q.r.fd = -1 // closed with the file
	}
	q.r.close()
	if q.mem != nil {
		_ = unix.Munmap(q.mem)
		q.mem = nil
	}
}

// reapLoop waits in Go's poller for completions (a request in an entry)
// and serves each in a goroutine, until the server stops.
func (q *queue) reapLoop() {
	defer q.s.loops.Done()
	rc, err := q.file.SyscallConn()
	if err != nil {
		q.s.opts.Logger.Printf("fuseuring: queue %d: %v", q.qid, err)
		return
	}
	var cs []completion
	for {
		cs = cs[:0]
		err := rc.Read(func(uintptr) bool {
			cs = q.r.reap(cs)
			return len(cs) > 0
		})
		if err != nil {
			select {
			case <-q.s.stopped:
			default:
				q.s.opts.Logger.Printf("fuseuring: queue %d: %v", q.qid, err)
			}
			return
		}
		q.dispatch(cs)
	}
}

// dispatch starts a goroutine for each entry that holds a request. An
// entry completed with an error left the ring (ENOTCONN: the connection
// ended or the thread that fetched it exited).
func (q *queue) dispatch(cs []completion) {
	for _, c := range cs {
		if c.userData >= uint64(len(q.ents)) {
			continue
		}
		if c.res < 0 {
			select {
			case <-q.s.stopped:
			default:
				if c.res != -int32(unix.ENOTCONN) {
					q.s.opts.Logger.Printf("fuseuring: queue %d entry %d: %v", q.qid, c.userData, unix.Errno(-c.res))
				}
			}
			continue
		}
		e := &q.ents[c.userData]
		q.s.serving.Add(1)
		go q.serve(e)
	}
}

// serve answers the request in e with go-fuse's ProtocolServer and
// commits the reply from this goroutine (COMMIT_AND_FETCH), which also
// gives the entry back for the next request.
func (q *queue) serve(e *entry) {
	defer q.s.serving.Done()
	q.s.ringReqs.Add(1)
	req, err := parseEntry(e.hdr, len(e.payload))
	if err != nil {
		q.s.opts.Logger.Printf("fuseuring: queue %d entry %d: %v", q.qid, e.idx, err)
		unique := binary.LittleEndian.Uint64(e.hdr[8:])
		putErrorReply(e.hdr, unique, int32(unix.EIO))
		req.commitID = binary.LittleEndian.Uint64(e.hdr[entInOutOff+8:])
	} else {
		in := [][]byte{e.hdr[:inHeaderSize], e.hdr[inOutSize : inOutSize+req.opLen], e.payload[:req.payloadLen]}
		out := [][]byte{e.hdr[:outHdrSize], e.payload}
		n, st := q.s.ps.HandleRequest(in, out)
		switch {
		case !st.Ok():
			putErrorReply(e.hdr, req.unique, int32(st))
		case n < outHdrSize:
			// go-fuse answers nothing (FORGET, INTERRUPT), which the
			// ring never carries; the entry still needs its commit
			putErrorReply(e.hdr, req.unique, int32(fuse.ENOSYS))
		default:
			putReplySize(e.hdr, n-outHdrSize)
		}
	}
	c := cmd{op: cmdCommitAndFetch, fd: q.s.fd, userData: uint64(e.idx), commitID: req.commitID, qid: q.qid}
	if err := q.r.submit(c); err != nil {
		select {
		case <-q.s.stopped:
		default:
			q.s.opts.Logger.Printf("fuseuring: queue %d entry %d: commit: %v", q.qid, e.idx, err)
		}
	}
}
