package fuseuring

import (
	"encoding/binary"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Notification codes (enum fuse_notify_code), sent as the error of a
// fuse_out_header with unique 0 over /dev/fuse (the ring carries none).
const (
	notifyInvalInode = 2
	notifyInvalEntry = 3
	notifyDelete     = 6
)

// notify writes a notification: the out header, then body.
func (s *Server) notify(code int32, body []byte) fuse.Status {
	b := make([]byte, outHdrSize+len(body))
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], uint32(code))
	copy(b[outHdrSize:], body)
	for {
		_, err := unix.Write(s.fd, b)
		if err == unix.EINTR {
			continue
		}
		return fuse.ToStatus(err)
	}
}

// InodeNotify invalidates the kernel's cache of node's data in [off,
// off+length) (length 0: to the end) and its attributes
// (FUSE_NOTIFY_INVAL_INODE). It is part of go-fuse's fs.ServerCallbacks.
func (s *Server) InodeNotify(node uint64, off int64, length int64) fuse.Status {
	b := make([]byte, 24)
	le := binary.LittleEndian
	le.PutUint64(b[0:], node)
	le.PutUint64(b[8:], uint64(off))
	le.PutUint64(b[16:], uint64(length))
	return s.notify(notifyInvalInode, b)
}

// EntryNotify invalidates the kernel's entry name in directory parent
// (FUSE_NOTIFY_INVAL_ENTRY).
func (s *Server) EntryNotify(parent uint64, name string) fuse.Status {
	b := make([]byte, 16+len(name)+1)
	le := binary.LittleEndian
	le.PutUint64(b[0:], parent)
	le.PutUint32(b[8:], uint32(len(name)))
	copy(b[16:], name)
	return s.notify(notifyInvalEntry, b)
}

// DeleteNotify tells the kernel that name, child of parent, was removed
// (FUSE_NOTIFY_DELETE).
func (s *Server) DeleteNotify(parent uint64, child uint64, name string) fuse.Status {
	b := make([]byte, 24+len(name)+1)
	le := binary.LittleEndian
	le.PutUint64(b[0:], parent)
	le.PutUint64(b[8:], child)
	le.PutUint32(b[16:], uint32(len(name)))
	copy(b[24:], name)
	return s.notify(notifyDelete, b)
}

// InodeRetrieveCache is not supported: ENOSYS.
func (s *Server) InodeRetrieveCache(node uint64, offset int64, dest []byte) (int, fuse.Status) {
	return 0, fuse.ENOSYS
}

// InodeNotifyStoreCache is not supported: ENOSYS.
func (s *Server) InodeNotifyStoreCache(node uint64, offset int64, data []byte) fuse.Status {
	return fuse.ENOSYS
}
