package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// File handle layout (at most nfs3.FHSize = 64 bytes):
//
//	byte 0       version (1)
//	bytes 1-4    export id (ExportID of the export path), big-endian
//	bytes 5-8    kernel handle type (struct file_handle.handle_type)
//	bytes 9-n    kernel handle (f_handle), at most 47 bytes
//	last 8       MAC: HMAC-SHA256 of the bytes before it, truncated
//
// The MAC binds the export id to the kernel handle, so that a client
// allowed on one export cannot relabel a handle of another export on the
// same file system (or forge one from a guessed inode) to pass that
// export's client list.
const (
	handleVersion = 1
	handleHdr     = 1 + 4 + 4 // version, export id, kernel handle type
	handleMAC     = 8
	handleMax     = nfs3.FHSize
)

// sealer makes and checks file handles with a MAC key.
type sealer struct {
	pool sync.Pool // *macState
}

// macState is a pooled HMAC-SHA256 with scratch space, so that computing a
// MAC neither allocates nor lets the caller's bytes escape.
type macState struct {
	h   hash.Hash
	in  [handleMax]byte
	sum [sha256.Size]byte
}

func newSealer(key []byte) *sealer {
	k := append([]byte(nil), key...)
	s := &sealer{}
	s.pool.New = func() any { return &macState{h: hmac.New(sha256.New, k)} }
	return s
}

// mac computes the MAC of b (at most handleMax bytes) into out (handleMAC
// bytes).
func (s *sealer) mac(b, out []byte) {
	m := s.pool.Get().(*macState)
	n := copy(m.in[:], b)
	m.h.Reset()
	m.h.Write(m.in[:n])
	copy(out, m.h.Sum(m.sum[:0]))
	s.pool.Put(m)
}

// encodeHandle writes into b (handleMax bytes) the file handle of the
// object name in dirfd (or dirfd itself with AT_EMPTY_PATH), never
// following a symlink, and returns its length. A kernel handle over 47
// bytes is an EOVERFLOW error.
func (s *sealer) encodeHandle(b []byte, exportID uint32, dirfd int, name string, flags int) (int, error) {
	h, _, err := unix.NameToHandleAt(dirfd, name, flags)
	if err != nil {
		return 0, err
	}
	return s.putHandle(b, exportID, h)
}

// putHandle writes the file handle of kernel handle h in export exportID
// into b (handleMax bytes) and returns its length.
func (s *sealer) putHandle(b []byte, exportID uint32, h unix.FileHandle) (int, error) {
	kb := h.Bytes()
	if handleHdr+len(kb)+handleMAC > handleMax {
		return 0, fmt.Errorf("kernel file handle of %d bytes: %w", len(kb), unix.EOVERFLOW)
	}
	b[0] = handleVersion
	binary.BigEndian.PutUint32(b[1:], exportID)
	binary.BigEndian.PutUint32(b[5:], uint32(h.Type()))
	n := handleHdr + copy(b[handleHdr:], kb)
	s.mac(b[:n], b[n:n+handleMAC])
	return n + handleMAC, nil
}

// makeFH returns the nfs3.FH of name in dirfd (see encodeHandle).
func (s *sealer) makeFH(exportID uint32, dirfd int, name string, flags int) (nfs3.FH, error) {
	var b [handleMax]byte
	n, err := s.encodeHandle(b[:], exportID, dirfd, name, flags)
	if err != nil {
		return nfs3.FH{}, err
	}
	return nfs3.NewFH(b[:n])
}

// fhOf returns the nfs3.FH of kernel handle h in export exportID.
func (s *sealer) fhOf(exportID uint32, h unix.FileHandle) (nfs3.FH, error) {
	var b [handleMax]byte
	n, err := s.putHandle(b[:], exportID, h)
	if err != nil {
		return nfs3.FH{}, err
	}
	return nfs3.NewFH(b[:n])
}

// parseHandle checks a file handle and splits it into its export id and
// kernel handle; a wrong length, version or MAC is nfs3.ErrBadHandle.
func (s *sealer) parseHandle(fh []byte) (uint32, unix.FileHandle, error) {
	if len(fh) <= handleHdr+handleMAC || len(fh) > handleMax || fh[0] != handleVersion {
		return 0, unix.FileHandle{}, nfs3.ErrBadHandle
	}
	n := len(fh) - handleMAC
	var m [handleMAC]byte
	s.mac(fh[:n], m[:])
	if !hmac.Equal(m[:], fh[n:]) {
		return 0, unix.FileHandle{}, nfs3.ErrBadHandle
	}
	id := binary.BigEndian.Uint32(fh[1:])
	typ := int32(binary.BigEndian.Uint32(fh[5:]))
	return id, unix.NewFileHandle(typ, fh[handleHdr:n]), nil
}

// defaultHandleKey derives the MAC key from the kernel handle of the
// server's root directory (inode and generation number): stable across
// restarts, and unknown to clients unless the root itself is exported.
func defaultHandleKey(rootFD int) ([]byte, error) {
	h, _, err := unix.NameToHandleAt(rootFD, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	sum.Write([]byte("nfsrdma-csi file handle key v1\x00"))
	binary.Write(sum, binary.BigEndian, h.Type())
	sum.Write(h.Bytes())
	return sum.Sum(nil), nil
}
