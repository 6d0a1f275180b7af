package verbs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FileMR is a memory region whose pages are a shared mapping of a file
// range: the file's page cache. Sending from it (a Send, an RDMA Write, an
// inbound RDMA Read) reads the file's current bytes without copying them
// first; with write access, data placed in it lands in the file's page
// cache. The embedded MR is the registration; Close deregisters it and
// unmaps the range.
//
// A page past the end of a file that shrank after RegFileMR faults (SIGBUS)
// when touched: the siw provider completes the work request with
// WCLocProtErr and moves the queue pair to error; a NIC reports a local
// protection error; code of the consumer that reads Bytes() itself must
// run with runtime/debug.SetPanicOnFault and recover.
type FileMR struct {
	MR
	mem []byte
}

// RegFileMR maps length bytes of f at offset off (a multiple of the page
// size, os.Getpagesize) shared, read-only unless access has
// AccessLocalWrite or AccessRemoteWrite (then f must be open for writing),
// and registers the mapping in pd with access (ibv_reg_mr over the mapped
// address with the ibverbs provider: the NIC reads the page cache). The
// range may extend past the end of the file; its bytes there are only
// valid once the file grows over them. With the ibverbs provider, a
// region with write access over a file of a file system that tracks dirty
// pages (ext4, xfs; not tmpfs) cannot be pinned by recent kernels (RegMR
// fails with EFAULT): register such files read-only; and a kernel before
// 6.2 cannot pin a read-only one (ib_umem_get asks FOLL_WRITE|FOLL_FORCE:
// EFAULT). Errors: ErrInvalidWR for an
// unaligned offset or a length not above 0; mmap(2)'s error (EACCES for a
// write mapping of a read-only file, ENODEV for a file that cannot be
// mapped); the provider's RegMR error.
func RegFileMR(pd PD, f *os.File, off, length int64, access Access) (*FileMR, error) {
	if length <= 0 || off < 0 || off%int64(os.Getpagesize()) != 0 || length > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("%w: file region of %d bytes at offset %d (the offset must be page-aligned)", ErrInvalidWR, length, off)
	}
	prot := unix.PROT_READ
	if access&(AccessLocalWrite|AccessRemoteWrite) != 0 {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(int(f.Fd()), off, int(length), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("verbs: mapping %d bytes of %s at %d: %w", length, f.Name(), off, err)
	}
	mr, err := pd.RegMR(mem, access)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &FileMR{MR: mr, mem: mem}, nil
}

// Close deregisters the region and unmaps the file range. No work request
// may use the region afterwards.
func (m *FileMR) Close() error {
	err := m.MR.Close()
	if merr := unix.Munmap(m.mem); err == nil {
		err = merr
	}
	m.mem = nil
	return err
}

// ProbeFileMR reports whether pd's device registers a read-only shared
// mapping of a file (the page cache, as RegFileMR with no write access
// maps it): it maps one page of an anonymous shmem file (memfd_create(2))
// that way and registers it. nil: it can; otherwise the error of the
// step that failed, the provider's RegMR error in particular (EFAULT with
// the ibverbs provider on Linux before 6.2, whose ib_umem_get pins regions
// without write access with FOLL_WRITE|FOLL_FORCE). Nothing stays mapped
// or registered.
func ProbeFileMR(pd PD) error {
	fd, err := unix.MemfdCreate("nfsrdma-probe-filemr", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("verbs: probing file regions: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:nfsrdma-probe-filemr")
	defer f.Close()
	page := int64(os.Getpagesize())
	if err := f.Truncate(page); err != nil {
		return fmt.Errorf("verbs: probing file regions: %w", err)
	}
	m, err := RegFileMR(pd, f, 0, page, 0)
	if err != nil {
		return err
	}
	return m.Close()
}
