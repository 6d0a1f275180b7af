package fuseuring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// DefaultEntries is the number of ring entries of each queue when
// Config.Entries is 0: the requests of one CPU's callers served at once.
// Each entry holds a payload buffer of MaxWrite bytes.
const DefaultEntries = 8

// FUSE opcodes the server looks at before go-fuse does (enum fuse_opcode).
const (
	opForget      = 2
	opInit        = 26
	opInterrupt   = 36
	opBatchForget = 42
	opSetLkW      = 33
)

// Transport names, for logs and metrics.
const (
	TransportIOURing = "io_uring"
	TransportDevFUSE = "dev_fuse"
)

// Config tunes a Server.
type Config struct {
	// Ring asks for FUSE over io_uring: offered in INIT, then the ring
	// entries registered on every queue. Without it, or if the kernel
	// does not offer it (FUSE_OVER_IO_URING missing from INIT), every
	// request is served over /dev/fuse.
	Ring bool
	// Entries is the ring entries per queue; 0 means DefaultEntries.
	Entries int
	// Inline reports whether the file system answers requests of opcode
	// (enum fuse_opcode) without waiting for another request of this
	// mount (a RELEASE, an unlock): those are answered on the queue's
	// thread, which saves a hand-off to a goroutine and back (the fastest
	// path), but holds the queue's other requests meanwhile. nil: none is.
	// SETLKW is never answered there. It is asked as each request comes
	// and may change its answer with the file system's state (no file
	// open: an unlink need not wait for a RELEASE); a request it took that
	// would, after all, wait for another learns so from OnQueueThread.
	Inline func(opcode uint32) bool
}

// Stats count what a Server served.
type Stats struct {
	// Transport is TransportIOURing when the ring serves the requests,
	// TransportDevFUSE otherwise.
	Transport string
	// Queues and Entries are the ring's queues (one per possible CPU) and
	// entries per queue; 0 over /dev/fuse.
	Queues, Entries int
	// RingRequests are the requests answered with COMMIT_AND_FETCH;
	// DevRequests those read from /dev/fuse (INIT, FORGET, INTERRUPT, and
	// every request without the ring).
	RingRequests, DevRequests uint64
	// Offloaded are the ring's requests answered by a goroutine rather
	// than on their queue's thread: those Config.Inline did not take,
	// SETLKW, and all but the last of requests that completed together.
	Offloaded uint64
}

// Server serves a FUSE connection with go-fuse's ProtocolServer, over
// /dev/fuse and, when negotiated, over io_uring.
type Server struct {
	fd   int
	dir  string
	opts fuse.MountOptions
	cfg  Config
	ps   *fuse.ProtocolServer
	fs   fuse.RawFileSystem

	bufSize int       // /dev/fuse read and reply buffers
	bufs    sync.Pool // *[]byte of bufSize
	qmu     sync.Mutex
	queues  []*queue // guarded by qmu
	ringErr error

	ringReqs, devReqs, offloaded atomic.Uint64

	loops   sync.WaitGroup // the /dev/fuse reader
	threads sync.WaitGroup // the queues' threads
	serving sync.WaitGroup // request goroutines
	stopped chan struct{}
	adopted chan struct{} // Adopt: closed when its reading may start (ServeAdopted)

	// resends tracks the requests read from /dev/fuse while the kernel
	// may send some again (resend.go); nil otherwise.
	resends    atomic.Pointer[resendTracker]
	resendMu   sync.Mutex
	resendDone ResendStats // of trackers dropped, guarded by resendMu
	// foreign: another process read requests of this connection that
	// were not sent again since (Adopt, until a Resend).
	foreign atomic.Bool
}

// NewServer returns a server for the FUSE connection of fd, an open
// /dev/fuse mounted on dir (Mount, or mount(2) by another process with
// "fd=N"). opts are go-fuse's (MaxWrite, capabilities, locks, Debug,
// Logger). Start serves it.
func NewServer(fd int, dir string, opts *fuse.MountOptions, cfg Config) *Server {
	o := *opts
	if o.MaxWrite <= 0 {
		o.MaxWrite = 128 << 10
	}
	if o.Logger == nil {
		o.Logger = defaultLogger()
	}
	if cfg.Ring {
		o.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	}
	if cfg.Entries <= 0 {
		cfg.Entries = DefaultEntries
	}
	s := &Server{fd: fd, dir: dir, opts: o, cfg: cfg, stopped: make(chan struct{}),
		bufSize: o.MaxWrite + 8192}
	s.bufs.New = func() any { b := make([]byte, s.bufSize); return &b }
	return s
}

// Start answers the kernel's INIT on /dev/fuse for fs, then serves in the
// background: /dev/fuse always (FORGET and INTERRUPT come there), and the
// ring when INIT negotiated FUSE_OVER_IO_URING and every queue registered
// its entries (before that, requests come over /dev/fuse). A ring that
// fails to set up is logged and left out (RingError); the connection
// then stays on /dev/fuse. Errors: reading INIT, a first request other
// than INIT, answering it.
func (s *Server) Start(fs fuse.RawFileSystem) error {
	s.fs = fs
	s.ps = fuse.NewProtocolServer(fs, &s.opts)
	in := s.getBuf()
	defer s.putBuf(in)
	n, err := s.readDev(*in)
	if err != nil {
		return fmt.Errorf("fuseuring: read INIT: %w", err)
	}
	if n < inHeaderSize || binary.LittleEndian.Uint32((*in)[4:]) != opInit {
		return fmt.Errorf("fuseuring: first request is not INIT")
	}
	out := s.getBuf()
	defer s.putBuf(out)
	m, st := s.ps.HandleRequest([][]byte{(*in)[:n]}, [][]byte{*out})
	if !st.Ok() || m < outHdrSize+int(unsafe.Sizeof(fuse.InitOut{})) {
		return fmt.Errorf("fuseuring: INIT: %v", st)
	}
	hdrErr := int32(binary.LittleEndian.Uint32((*out)[4:]))
	initOut := (*fuse.InitOut)(unsafe.Pointer(&(*out)[outHdrSize]))
	ring := hdrErr == 0 && initOut.Flags64()&fuse.CAP_OVER_IO_URING != 0
	if err := s.writeDev((*out)[:m]); err != nil {
		return fmt.Errorf("fuseuring: INIT reply: %w", err)
	}
	s.devReqs.Add(1)
	if hdrErr != 0 {
		return fmt.Errorf("fuseuring: INIT refused: errno %d", -hdrErr)
	}
	s.loops.Add(1)
	go s.readLoop()
	if ring {
		if err := s.startRing(); err != nil {
			s.ringErr = err
			s.opts.Logger.Printf("fuseuring: FUSE over io_uring not set up, serving over /dev/fuse: %v", err)
		}
	} else if s.cfg.Ring {
		s.ringErr = errors.New("fuseuring: the kernel did not offer FUSE_OVER_IO_URING in INIT")
	}
	if err := s.pollHack(); err != nil {
		s.opts.Logger.Printf("fuseuring: POLL not switched off on %s: %v", s.dir, err)
	}
	return nil
}

// pollHack makes the kernel send one POLL, which go-fuse answers ENOSYS
// (its ".go-fuse-epoll-hack" file), so that it sends no more: Go
// registers every file it opens with its epoll, and an epoll_ctl(2) on a
// file of this mount from this process would otherwise wait for a POLL
// answer while holding one of the runtime's Ps, which can stop every
// goroutine at the next garbage collection, this server's included (as
// go-fuse's Server.WaitMount does).
func (s *Server) pollHack() error {
	fd, err := unix.Open(s.dir+"/.go-fuse-epoll-hack", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	return err
}

// RingError says why a server configured for the ring serves over
// /dev/fuse; nil if the ring serves or was not asked for.
func (s *Server) RingError() error { return s.ringErr }

// Stats returns the transport and request counts.
func (s *Server) Stats() Stats {
	st := Stats{Transport: TransportDevFUSE, RingRequests: s.ringReqs.Load(), DevRequests: s.devReqs.Load(), Offloaded: s.offloaded.Load()}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if len(s.queues) > 0 {
		st.Transport, st.Queues, st.Entries = TransportIOURing, len(s.queues), s.cfg.Entries
	}
	return st
}

func (s *Server) getBuf() *[]byte  { return s.bufs.Get().(*[]byte) }
func (s *Server) putBuf(b *[]byte) { s.bufs.Put(b) }

// readDev reads one request from /dev/fuse, retrying EINTR and ENOENT (a
// request interrupted before it was read).
func (s *Server) readDev(buf []byte) (int, error) {
	for {
		n, err := unix.Read(s.fd, buf)
		if err == unix.EINTR || err == unix.ENOENT || err == unix.EAGAIN {
			continue
		}
		return n, err
	}
}

// writeDev writes a reply or notification to /dev/fuse. ENOENT (the
// request was interrupted or the connection aborted it) is not an error.
func (s *Server) writeDev(b []byte) error {
	for {
		_, err := unix.Write(s.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
}

// readLoop serves /dev/fuse until the connection ends (ENODEV): FORGET,
// BATCH_FORGET and INTERRUPT in the reader, so that an interrupt is never
// queued behind the request it interrupts; others in a goroutine each.
// While requests are tracked (resend.go), a copy the kernel resent of a
// request this server is handling or answered is not handled again.
func (s *Server) readLoop() {
	defer s.loops.Done()
	defer s.stop()
	for {
		b := s.getBuf()
		t0 := s.resends.Load()
		if t0 != nil && t0.notifying.Load() && !t0.draining.Load() {
			s.awaitCopies(t0)
		}
		after := t0 != nil && t0.sent.Load()
		n, err := s.readDev(*b)
		if err != nil {
			s.putBuf(b)
			if err != unix.ENODEV {
				s.opts.Logger.Printf("fuseuring: read /dev/fuse: %v", err)
			}
			return
		}
		s.devReqs.Add(1)
		if n >= inHeaderSize {
			switch binary.LittleEndian.Uint32((*b)[4:]) {
			case opInterrupt:
				s.serveInterrupt(b, n)
				continue
			case opForget, opBatchForget:
				s.serveDev(b, n, nil)
				continue
			}
		}
		// the tracker as of now: one that started while the read
		// waited (Resend) must see what it returned, a copy of its own
		// notification included
		t := s.resends.Load()
		if t != t0 {
			after = false
		}
		var tracked *resendTracker
		if t != nil && n >= inHeaderSize {
			unique := binary.LittleEndian.Uint64((*b)[8:])
			act, reply := t.read(unique, after)
			switch act {
			case readJoined:
				s.putBuf(b)
				continue
			case readReplay:
				s.putBuf(b)
				if err := s.writeDev(reply); err != nil && err != unix.ENODEV {
					s.opts.Logger.Printf("fuseuring: write /dev/fuse: %v", err)
				}
				continue
			case readTracked:
				tracked = t
			case readDrained:
				s.dropTracker(t)
			}
		}
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			s.serveDev(b, n, tracked)
		}()
	}
}

// interruptRetries and interruptRetryDelay bound how long an INTERRUPT
// that names no request in flight is tried again: 2 s.
const (
	interruptRetries    = 2000
	interruptRetryDelay = time.Millisecond
)

// serveInterrupt passes the INTERRUPT in (*b)[:n] to go-fuse, which
// cancels the request it names. The kernel sends it once the request has
// reached the server (FR_SENT), which for a ring request is when the
// request is copied into its entry, before the queue hands it to go-fuse:
// an INTERRUPT found no request in flight is tried again every
// millisecond in a goroutine until it finds it or for 2 s. (Answering
// EAGAIN, as go-fuse's Server does, makes the kernel send it again only
// for requests read from /dev/fuse: fs/fuse/dev.c looks the request up
// among those.)
func (s *Server) serveInterrupt(b *[]byte, n int) {
	in := append([]byte(nil), (*b)[:n]...)
	s.putBuf(b)
	if t := s.resends.Load(); t != nil && len(in) >= inHeaderSize+8 {
		// a joined copy is handled under its request's unique
		u := binary.LittleEndian.Uint64(in[inHeaderSize:])
		binary.LittleEndian.PutUint64(in[inHeaderSize:], t.interruptTarget(u))
	}
	if s.interrupt(in) {
		return
	}
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		for range interruptRetries {
			time.Sleep(interruptRetryDelay)
			select {
			case <-s.stopped:
				return
			default:
			}
			if s.interrupt(in) {
				return
			}
		}
	}()
}

// interrupt passes an INTERRUPT to go-fuse; it reports whether go-fuse
// found the request (no reply: EAGAIN is its answer otherwise).
func (s *Server) interrupt(in []byte) bool {
	var out [outHdrSize + 64]byte
	m, st := s.ps.HandleRequest([][]byte{in}, [][]byte{out[:]})
	return st.Ok() && m == 0
}

// serveDev answers the request in (*b)[:n] read from /dev/fuse; t, when
// not nil, tracks it (finishTracked).
func (s *Server) serveDev(b *[]byte, n int, t *resendTracker) {
	defer s.putBuf(b)
	out := s.getBuf()
	defer s.putBuf(out)
	m, st := s.ps.HandleRequest([][]byte{(*b)[:n]}, [][]byte{*out})
	if !st.Ok() {
		if n < inHeaderSize {
			return
		}
		var hdr [headerSize]byte
		putErrorReply(hdr[:], binary.LittleEndian.Uint64((*b)[8:]), int32(st))
		m = copy(*out, hdr[:outHdrSize])
	}
	if t != nil {
		s.finishTracked(t, binary.LittleEndian.Uint64((*b)[8:])&^resendBit, (*out)[:m])
		return
	}
	if m < outHdrSize {
		return
	}
	err := s.writeReply((*out)[:m])
	if err == unix.ENOENT {
		// resent since it was read, before tracking started; or an
		// aborted request
		if t := s.resends.Load(); t != nil {
			s.refusedUntracked(t, (*out)[:m])
		}
		return
	}
	if err != nil && err != unix.ENODEV {
		s.opts.Logger.Printf("fuseuring: write /dev/fuse: %v", err)
	}
}

// stop ends the queues' threads once the connection is gone.
func (s *Server) stop() {
	close(s.stopped)
	s.qmu.Lock()
	defer s.qmu.Unlock()
	for _, q := range s.queues {
		q.quit.Store(true)
		q.wake()
	}
}

// Wait blocks until the connection ends (unmount or abort), then releases
// the ring and /dev/fuse in the background once the requests in flight
// are answered (a queue's thread may be answering one), and calls the
// file system's OnUnmount.
func (s *Server) Wait() {
	s.loops.Wait()
	go func() {
		s.threads.Wait()
		s.serving.Wait()
		s.qmu.Lock()
		defer s.qmu.Unlock()
		for _, q := range s.queues {
			q.release()
		}
		_ = unix.Close(s.fd)
		s.fs.OnUnmount()
	}()
}

// Unmount unmounts the directory (umount2(2); the caller decides what to
// do when it is busy). Errors are umount2's.
func (s *Server) Unmount() error {
	return unix.Unmount(s.dir, 0)
}

// Abort aborts the FUSE connection (Abort of the directory's connection):
// every request, in flight or to come, fails with ENOTCONN.
func (s *Server) Abort() error {
	return Abort(s.dir)
}

// Close unmounts the directory, aborting the connection if unmount fails,
// and waits for the server to stop. Errors are unmount's and abort's
// when both failed.
func (s *Server) Close() error {
	var err error
	if uerr := s.Unmount(); uerr != nil {
		if aerr := s.Abort(); aerr != nil {
			err = errors.Join(uerr, aerr)
		}
		_ = unix.Unmount(s.dir, unix.MNT_DETACH)
	}
	s.Wait()
	return err
}
