package siw

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
)

// batchFPDUs is how many FPDUs one writev carries at most.
const batchFPDUs = 32

const (
	hdrSlot = 2 + untaggedHdrLen // room for the ULPDU length and the largest DDP header
	trlSlot = 8                  // pad (<= 3) + CRC (4), rounded
)

// fpduWriter frames ULPDUs into MPA FPDUs (RFC 5044 section 4), apart from
// any connection state: each FPDU is the 2-octet ULPDU length and the DDP
// header (written by the caller into the slot header returns), the payload
// pieces, the pad to a 4-octet boundary and the CRC32c of all that
// (section 4.4; little-endian, as Linux siw writes it; zero when CRC is
// off), with a marker at every 512th octet of the stream when markers were
// negotiated for this direction (section 4.3). FPDUs are batched, at most
// batchFPDUs, and written with one writev (net.Buffers) that gathers the
// payload from where it lies: no copy, except on the marker path, which
// lays the batch out flat.
//
// Its buffers are sized once (newFPDUWriter): no allocation per FPDU.
// Errors are the destination's write errors. Not safe for concurrent use
// (qp.txMu guards it).
type fpduWriter struct {
	w       io.Writer
	crcOn   bool
	markers bool // markers in the stream we write

	hdr   [batchFPDUs * hdrSlot]byte
	trl   [batchFPDUs * trlSlot]byte
	iov   [][]byte
	ends  [batchFPDUs]int // iov index after each FPDU of the batch
	nf    int             // FPDUs in the batch
	ulpdu int             // ULPDU octets of the FPDU being built
	crc   uint32          // its running CRC32c (no markers)
	wbufs net.Buffers
	pos   uint64 // octets written since full operation began (marker positions)
	flat  []byte // staging for the marker path

	writes uint64 // batches written (tests)
}

// newFPDUWriter writes to w; maxPieces is the most payload pieces one FPDU
// carries (the largest SGL).
func newFPDUWriter(w io.Writer, crcOn, markers bool, maxPieces int) *fpduWriter {
	return &fpduWriter{w: w, crcOn: crcOn, markers: markers, iov: make([][]byte, 0, batchFPDUs*(2+maxPieces))}
}

// header returns the slot for the next FPDU's ULPDU length and DDP header
// of hl octets (2+hl bytes), valid until that FPDU is written. The caller
// fills it, then calls begin with it.
func (w *fpduWriter) header(hl int) []byte {
	f := w.nf
	return w.hdr[f*hdrSlot : f*hdrSlot+2+hl]
}

// begin starts an FPDU with h, its ULPDU length and DDP header.
func (w *fpduWriter) begin(h []byte) {
	w.iov = append(w.iov, h)
	w.ulpdu = len(h) - mpaHdrLen
	w.crc = crc32.Update(0, castagnoli, h)
}

// payload adds a piece of the FPDU's payload; p must stay unchanged until
// the batch is written (flush).
func (w *fpduWriter) payload(p []byte) {
	if len(p) == 0 {
		return
	}
	w.iov = append(w.iov, p)
	w.ulpdu += len(p)
	if w.crcOn && !w.markers {
		w.crc = crc32.Update(w.crc, castagnoli, p)
	}
}

// end closes the FPDU with its pad and CRC and writes the batch when it is
// full.
func (w *fpduWriter) end() error {
	f := w.nf
	pad := padLen(w.ulpdu)
	t := w.trl[f*trlSlot : f*trlSlot+pad+mpaCRCLen]
	clear(t[:pad])
	crc := uint32(0)
	if w.crcOn {
		crc = crc32.Update(w.crc, castagnoli, t[:pad])
	}
	binary.LittleEndian.PutUint32(t[pad:], crc) // the marker path computes it again
	w.iov = append(w.iov, t)
	w.ends[f] = len(w.iov)
	w.nf++
	if w.nf == batchFPDUs {
		return w.flush()
	}
	return nil
}

// flush writes the batched FPDUs.
func (w *fpduWriter) flush() error {
	if w.nf == 0 {
		return nil
	}
	var err error
	if w.markers {
		w.flat = w.appendMarked(w.flat[:0])
		_, err = w.w.Write(w.flat)
	} else {
		w.wbufs = w.iov
		_, err = w.wbufs.WriteTo(w.w)
	}
	clear(w.iov)
	w.iov = w.iov[:0]
	w.nf = 0
	w.writes++
	return err
}

// appendMarked lays out the batched FPDUs with an MPA marker at every 512th
// octet of the stream (RFC 5044 section 4.3) and computes each CRC over the
// FPDU including its markers (section 4.4): a marker that falls just before
// an FPDU belongs to it (FPDUPTR 0), one between the pad and the CRC to the
// FPDU it ends.
func (w *fpduWriter) appendMarked(out []byte) []byte {
	start := 0
	for f := 0; f < w.nf; f++ {
		parts := w.iov[start:w.ends[f]]
		start = w.ends[f]
		var crc uint32
		marker := func(ptr uint64) {
			var m [mpaMarkerLen]byte
			binary.BigEndian.PutUint16(m[2:], uint16(ptr))
			out = append(out, m[:]...)
			crc = crc32.Update(crc, castagnoli, m[:])
			w.pos += mpaMarkerLen
		}
		if w.pos%mpaMarkerIntv == 0 {
			marker(0)
		}
		fpduStart := w.pos
		last := len(parts) - 1
		for i, p := range parts {
			if i == last {
				p = p[:len(p)-mpaCRCLen] // the pad; the CRC comes after
			}
			for len(p) > 0 {
				if w.pos%mpaMarkerIntv == 0 {
					marker(w.pos - fpduStart)
				}
				n := min(len(p), int(mpaMarkerIntv-w.pos%mpaMarkerIntv))
				out = append(out, p[:n]...)
				crc = crc32.Update(crc, castagnoli, p[:n])
				w.pos += uint64(n)
				p = p[n:]
			}
		}
		if w.pos%mpaMarkerIntv == 0 {
			marker(w.pos - fpduStart)
		}
		if !w.crcOn {
			crc = 0
		}
		out = binary.LittleEndian.AppendUint32(out, crc)
		w.pos += mpaCRCLen
	}
	return out
}
