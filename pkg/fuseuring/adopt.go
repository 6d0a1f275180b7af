package fuseuring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// notifyResend is FUSE_NOTIFY_RESEND (enum fuse_notify_code, Linux 6.9,
// protocol 7.40): the kernel queues again every request read from the
// connection and not yet answered.
const notifyResend = 7

// ErrNoResend says that the kernel does not announce FUSE_HAS_RESEND in
// INIT (before Linux 6.9): requests read and not answered by a process
// that went away cannot be asked for again.
var ErrNoResend = errors.New("fuseuring: the kernel cannot resend requests (FUSE_NOTIFY_RESEND needs Linux 6.9)")

// Adopt serves, for fs, a FUSE connection that another server already
// initialized: the kernel sends no second INIT, so init (the kernel's
// INIT request as that server received it, fuse.Server.KernelSettings)
// is replayed to go-fuse's ProtocolServer, which negotiates the same
// parameters as the first server did (same MountOptions) without a reply
// reaching the kernel. Nothing is read from /dev/fuse until ServeAdopted;
// Wait waits for that reading to end. The server tracks the requests it
// reads until the copies of its Resend are read, so that none is handled
// twice (Resend). Errors: an INIT go-fuse refuses (major version, minor
// below its minimum).
func (s *Server) Adopt(fs fuse.RawFileSystem, init fuse.InitIn) error {
	s.fs = fs
	s.ps = fuse.NewProtocolServer(fs, &s.opts)
	in := make([]byte, unsafe.Sizeof(fuse.InitIn{}))
	init.InHeader = fuse.InHeader{Length: uint32(len(in)), Opcode: opInit, Unique: 1, NodeId: 0}
	copy(in, unsafe.Slice((*byte)(unsafe.Pointer(&init)), len(in)))
	out := s.getBuf()
	defer s.putBuf(out)
	m, st := s.ps.HandleRequest([][]byte{in}, [][]byte{*out})
	if !st.Ok() || m < outHdrSize {
		return fmt.Errorf("fuseuring: replayed INIT: %v", st)
	}
	if e := int32(binary.LittleEndian.Uint32((*out)[4:])); e != 0 {
		return fmt.Errorf("fuseuring: replayed INIT refused: errno %d", -e)
	}
	s.trackResends(false)
	s.foreign.Store(true)
	s.adopted = make(chan struct{})
	s.loops.Add(1)
	go func() {
		<-s.adopted
		s.readLoop()
	}()
	return nil
}

// ServeAdopted starts serving the connection Adopt took, as Start does
// without the ring. With resend it first asks the kernel to send again
// what was read and not answered (Resend), as after a crash of the
// process that served the connection: nothing is in flight here yet.
// Errors: Resend's (the connection is served anyway).
func (s *Server) ServeAdopted(resend bool) error {
	var err error
	if resend {
		err = s.Resend()
	}
	close(s.adopted)
	return err
}

// CanResend reports whether the kernel of init resends requests on
// FUSE_NOTIFY_RESEND (FUSE_HAS_RESEND in INIT).
func CanResend(init *fuse.InitIn) bool {
	return init.Flags64()&fuse.CAP_HAS_RESEND != 0
}

// Resend asks the kernel to queue again every request of the connection
// that was read and not answered (FUSE_NOTIFY_RESEND, Linux 6.9), by any
// process: the requests a process that served the connection before
// read and never answered, and those this server is handling. The copies
// carry FUSE_UNIQUE_RESEND in their unique. A server that tracks its
// requests (Adopt) handles each request once: a copy of one it is
// handling is answered by that handler's reply, and a copy of one it
// answered between the resend and reading the copy (the reply was
// refused) by that reply; copies of the others are handled (resend.go,
// ResendStats). On a server that does not (Start), tracking starts with
// the call, and a copy of a request read before it is answered by that
// request's reply too, every request of the connection being this
// server's; so too on an adopted server whose copies of the requests
// the process before it read were all read (a second Resend). Call it
// once; tracking ends when its copies are read, or when it fails.
// Errors: the write's (EINVAL before Linux 6.9).
func (s *Server) Resend() error {
	t := s.resends.Load()
	if t == nil || t.draining.Load() {
		t = s.trackResends(!s.foreign.Load())
	}
	t.notifying.Store(true)
	st := s.notify(notifyResend, nil)
	if !st.Ok() {
		// nothing will be sent again: tracking ends, as when every
		// copy was read
		s.copiesRead(t)
		return fmt.Errorf("fuseuring: FUSE_NOTIFY_RESEND: %v", st)
	}
	t.sent.Store(true)
	s.foreign.Store(false) // what another process read is sent again
	return nil
}
