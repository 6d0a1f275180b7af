package nfs3

import (
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
