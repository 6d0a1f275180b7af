package fuseuring

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Layout of struct fuse_uring_req_header (include/uapi/linux/fuse.h,
// protocol 7.42), the header buffer (iov[0]) of a ring entry.
const (
	inOutSize    = 128 // FUSE_URING_IN_OUT_HEADER_SZ: fuse_in_header, fuse_out_header
	opInSize     = 128 // FUSE_URING_OP_IN_OUT_SZ: the opcode's fixed argument
	entInOutOff  = inOutSize + opInSize
	headerSize   = entInOutOff + 32 // with struct fuse_uring_ent_in_out
	inHeaderSize = 40               // struct fuse_in_header
	outHdrSize   = 16               // struct fuse_out_header
)

// Commands of IORING_OP_URING_CMD on /dev/fuse (enum fuse_uring_cmd).
const (
	cmdRegister       = 1 // FUSE_IO_URING_CMD_REGISTER
	cmdCommitAndFetch = 2 // FUSE_IO_URING_CMD_COMMIT_AND_FETCH
)

// errBadEntry is a ring entry header the kernel should not have written.
var errBadEntry = errors.New("fuseuring: bad ring entry header")

// request is what the kernel put in a ring entry: the request is the byte
// stream in_out[:40] (fuse_in_header), op_in[:opLen] (the opcode's first
// argument) and payload[:payloadLen] (the other arguments), as /dev/fuse
// would have delivered it in one read.
type request struct {
	opcode     uint32
	unique     uint64
	opLen      int
	payloadLen int
	commitID   uint64 // fuse_uring_ent_in_out.commit_id, for the COMMIT
}

// parseEntry decodes the header buffer hdr of a ring entry whose payload
// buffer holds payloadCap bytes (fs/fuse/dev_uring.c,
// fuse_uring_args_to_ring): fuse_in_header.len is the whole request,
// payload_sz the bytes in the payload buffer, so the opcode's argument in
// op_in is len - 40 - payload_sz bytes. Errors wrap errBadEntry: a short
// buffer, a length below the in header, a payload over payloadCap or an
// argument over op_in's 128 bytes.
func parseEntry(hdr []byte, payloadCap int) (request, error) {
	if len(hdr) < headerSize {
		return request{}, fmt.Errorf("%w: %d bytes", errBadEntry, len(hdr))
	}
	le := binary.LittleEndian
	total := int64(le.Uint32(hdr[0:]))
	r := request{
		opcode:     le.Uint32(hdr[4:]),
		unique:     le.Uint64(hdr[8:]),
		commitID:   le.Uint64(hdr[entInOutOff+8:]),
		payloadLen: int(le.Uint32(hdr[entInOutOff+16:])),
	}
	if r.payloadLen > payloadCap {
		return request{}, fmt.Errorf("%w: payload of %d bytes in a %d-byte buffer", errBadEntry, r.payloadLen, payloadCap)
	}
	op := total - inHeaderSize - int64(r.payloadLen)
	if total < inHeaderSize || op < 0 || op > opInSize {
		return request{}, fmt.Errorf("%w: request of %d bytes with a %d-byte payload", errBadEntry, total, r.payloadLen)
	}
	r.opLen = int(op)
	return r, nil
}

// putReplySize sets fuse_uring_ent_in_out.payload_sz of hdr: the bytes of
// the reply after the fuse_out_header, all in the payload buffer.
func putReplySize(hdr []byte, n int) {
	binary.LittleEndian.PutUint32(hdr[entInOutOff+16:], uint32(n))
}

// putErrorReply writes a fuse_out_header answering unique with -errno and
// no payload into hdr's in_out.
func putErrorReply(hdr []byte, unique uint64, errno int32) {
	le := binary.LittleEndian
	le.PutUint32(hdr[0:], outHdrSize)
	le.PutUint32(hdr[4:], uint32(-errno))
	le.PutUint64(hdr[8:], unique)
	putReplySize(hdr, 0)
}

// putCmdReq writes struct fuse_uring_cmd_req into an SQE's command area.
func putCmdReq(b []byte, flags, commitID uint64, qid uint16) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], flags)
	le.PutUint64(b[8:], commitID)
	le.PutUint16(b[16:], qid)
}
