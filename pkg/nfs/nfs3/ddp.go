package nfs3

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// ErrCountMismatch means a READ result or WRITE argument whose count field
// differs from the length of its data (Linux rejects both, as garbage
// arguments on the server and as EIO on the client).
var ErrCountMismatch = errors.New("nfs3: count does not match data length")

// DDPEligibleArg reports whether the arguments of proc end with a
// DDP-eligible item (RFC 8267 section 4): WRITE data and SYMLINK pathname.
func DDPEligibleArg(proc uint32) bool { return proc == ProcWrite || proc == ProcSymlink }

// DDPEligibleResult reports whether the result of proc ends with a
// DDP-eligible item (RFC 8267 section 4): READ data and READLINK pathname.
func DDPEligibleResult(proc uint32) bool { return proc == ProcRead || proc == ProcReadlink }

// encodeDDP writes the XDR length word of a DDP-eligible item and returns
// the item, not appended.
func encodeDDP(e *xdr.Encoder, item []byte) []byte {
	e.Uint32(uint32(len(item)))
	return item
}

// decodeDDP reads the length word of a DDP-eligible item of at most max
// bytes and returns the item: payload[:length] if the transport placed it,
// else the next bytes of d (with their padding). Both alias their source.
func decodeDDP(d *xdr.Decoder, payload []byte, placed bool, max int, what string) []byte {
	n := d.Uint32()
	if d.Err() != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		d.SetErr(fmt.Errorf("%w: %s of %d bytes, maximum %d", xdr.ErrTooLong, what, n, max))
		return nil
	}
	if n == 0 {
		return nil // an empty item is nil whichever way it came
	}
	if !placed {
		return d.Fixed(int(n))
	}
	if uint64(n) > uint64(len(payload)) {
		d.SetErr(fmt.Errorf("%w: placed %s has %d bytes, its length word says %d", xdr.ErrShort, what, len(payload), n))
		return nil
	}
	return payload[:n:n]
}

// LocateDDPResult returns how a stream transport finds the DDP-eligible
// result of proc in its reply (sunrpc.Call.LocateReplyPayload): for READ
// ReadResDataAt, for READLINK ReadlinkResPathAt, otherwise nil.
func LocateDDPResult(proc uint32) func(results []byte) int {
	switch proc {
	case ProcRead:
		return ReadResDataAt
	case ProcReadlink:
		return ReadlinkResPathAt
	}
	return nil
}

// ReadResDataAt returns the byte offset, in results (the start of an
// encoded READ3res, RFC 1813 section 3.3.6), of the data's XDR length
// word: 100 with file_attributes, 16 without. It returns -1 for a status
// other than NFS3_OK (no data follows), an attributes_follow other than 0
// or 1, or results that end before the length word.
func ReadResDataAt(results []byte) int { return resultAt(results, 8) }

// ReadlinkResPathAt is ReadResDataAt for READLINK3res (RFC 1813 section
// 3.3.5): the path's length word is at 92 with symlink_attributes, 8
// without.
func ReadlinkResPathAt(results []byte) int { return resultAt(results, 0) }

// resultAt finds the length word that follows the status, a post_op_attr
// and fixed more bytes of an OK result.
func resultAt(results []byte, fixed int) int {
	if len(results) < 8 || binary.BigEndian.Uint32(results) != uint32(OK) {
		return -1
	}
	at := 8
	switch binary.BigEndian.Uint32(results[4:]) {
	case 0:
	case 1:
		at += FattrSize
	default:
		return -1
	}
	at += fixed
	if at+4 > len(results) {
		return -1
	}
	return at
}
