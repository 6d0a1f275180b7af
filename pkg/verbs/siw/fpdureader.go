package siw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// streamSource is the byte stream an fpduReader reads: the connection's
// socket (sockReader) or, in tests, bytes in memory.
type streamSource interface {
	// readFull fills p, as io.ReadFull.
	readFull(p []byte) error
	// buffered is the number of bytes read ahead and not yet consumed.
	buffered() int
}

// fpduReader reads MPA FPDUs (RFC 5044 section 4) from a stream, apart from
// any connection state: the caller reads each FPDU's ULPDU length and DDP
// header, then its payload, through read, and checks its trailer with end.
// It strips markers (section 4.3) when they were negotiated for this
// direction, checking that each points at the start of its FPDU, and keeps
// the running CRC32c (section 4.4) of the current FPDU, markers included.
//
// Errors: errMarker (wrapped) for a marker that does not point at the FPDU
// start, a *crcError for a CRC32c that does not match, and the source's
// errors (io.EOF, io.ErrUnexpectedEOF, a *net.OpError) as they come.
//
// Not safe for concurrent use: the receive goroutine owns it.
type fpduReader struct {
	src       streamSource
	markers   bool   // markers in the stream we read
	crcOn     bool   // CRC32c negotiated: end checks it
	pos       uint64 // stream octets consumed since full operation began
	fpduStart uint64
	crc       uint32
	mk        [mpaMarkerLen]byte
	trl       [8]byte // pad (at most 3) and CRC
}

// errMarker reports a marker whose FPDUPTR does not point at the FPDU start.
var errMarker = errors.New("marker does not point at the FPDU start")

// crcError reports an FPDU whose CRC field (little-endian, as Linux siw
// writes it) does not match the CRC32c computed over the FPDU.
type crcError struct{ got, computed uint32 }

func (e *crcError) Error() string {
	return fmt.Sprintf("CRC32c 0x%08x, computed 0x%08x", e.got, e.computed)
}

// begin starts a new FPDU: a marker due here precedes it, points nowhere
// (FPDUPTR 0) and is covered by its CRC.
func (r *fpduReader) begin() error {
	r.crc = 0
	if r.markers && r.pos%mpaMarkerIntv == 0 {
		if err := r.marker(0); err != nil {
			return err
		}
	}
	r.fpduStart = r.pos
	return nil
}

func (r *fpduReader) marker(want uint64) error {
	if err := r.src.readFull(r.mk[:]); err != nil {
		return err
	}
	r.crc = crc32.Update(r.crc, castagnoli, r.mk[:])
	ptr := uint64(binary.BigEndian.Uint16(r.mk[2:]) &^ 3)
	r.pos += mpaMarkerLen
	if ptr != want {
		return fmt.Errorf("%w: FPDUPTR %d, want %d", errMarker, ptr, want)
	}
	return nil
}

// read fills p with the next bytes of the current FPDU (its length, DDP
// header or payload), markers stripped; sum says whether p is covered by
// the CRC (everything but the CRC field itself).
func (r *fpduReader) read(p []byte, sum bool) error {
	if !r.markers {
		if err := r.src.readFull(p); err != nil {
			return err
		}
		if sum && r.crcOn {
			r.crc = crc32.Update(r.crc, castagnoli, p)
		}
		r.pos += uint64(len(p))
		return nil
	}
	for len(p) > 0 {
		if r.pos%mpaMarkerIntv == 0 {
			if err := r.marker(r.pos - r.fpduStart); err != nil {
				return err
			}
		}
		n := min(len(p), int(mpaMarkerIntv-r.pos%mpaMarkerIntv))
		if err := r.src.readFull(p[:n]); err != nil {
			return err
		}
		if sum {
			r.crc = crc32.Update(r.crc, castagnoli, p[:n])
		}
		r.pos += uint64(n)
		p = p[n:]
	}
	return nil
}

// end reads the trailer of an FPDU whose ULPDU was ulpdu octets (its
// length field's value): the pad to a 4-octet boundary and the CRC field,
// which it checks when CRC32c was negotiated.
func (r *fpduReader) end(ulpdu int) error {
	pad := padLen(ulpdu)
	if err := r.read(r.trl[:pad], true); err != nil {
		return err
	}
	if err := r.read(r.trl[pad:pad+mpaCRCLen], false); err != nil {
		return err
	}
	if r.crcOn {
		if got := binary.LittleEndian.Uint32(r.trl[pad:]); got != r.crc {
			return &crcError{got: got, computed: r.crc}
		}
	}
	return nil
}
