package sunrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Record marking (RFC 5531 section 11): on a byte stream, a record is one or
// more fragments, each a 4-byte big-endian header (bit 31: last fragment;
// bits 0-30: fragment length in bytes) followed by that many bytes.
const (
	lastFragment   = 1 << 31
	maxFragmentLen = 1<<31 - 1
)

// DefaultMaxRecordSize is the default bound, in bytes, of one record-marked
// RPC message: 1 MiB (the largest NFSv3 READ/WRITE this project issues, and
// the Linux knfsd maximum rsize/wsize) plus 64 KiB for the RPC and NFS
// headers and attributes around it.
const DefaultMaxRecordSize = 1<<20 + 64<<10

// recordReader reads record-marked records from a stream.
type recordReader struct {
	r   io.Reader
	max int
	hdr [4]byte
}

// readRecord reads one whole record (all its fragments) into buf[:0] and
// returns it, growing buf only as far as the fragments read so far need. A
// record that would exceed rr.max bytes is refused as soon as the fragment
// header saying so is read: nothing of that size is allocated or read.
// Errors: io.EOF at a record boundary (a clean end); ErrMalformed wrapping
// io.ErrUnexpectedEOF when the stream ends inside a record; ErrRecordTooLarge;
// read errors as they come.
func (rr *recordReader) readRecord(buf []byte) ([]byte, error) {
	h, err := rr.readHeader(false)
	if err != nil {
		return buf[:0], err
	}
	return rr.readFrom(buf, h)
}

// readHeader reads one fragment header. started says a record is under way,
// so that the stream ending here is ErrMalformed, not io.EOF.
func (rr *recordReader) readHeader(started bool) (uint32, error) {
	if _, err := io.ReadFull(rr.r, rr.hdr[:]); err != nil {
		if started || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w: stream ended inside a record: %w", ErrMalformed, io.ErrUnexpectedEOF)
		}
		return 0, err
	}
	return binary.BigEndian.Uint32(rr.hdr[:]), nil
}

// readFrom is readRecord once the record's first fragment header h has
// been read.
func (rr *recordReader) readFrom(buf []byte, h uint32) ([]byte, error) {
	buf = buf[:0]
	for {
		n := int(h &^ lastFragment)
		if n > rr.max-len(buf) {
			return buf, fmt.Errorf("%w: %d bytes or more, limit %d (RFC 5531 section 11)", ErrRecordTooLarge, len(buf)+n, rr.max)
		}
		off := len(buf)
		if cap(buf) < off+n {
			// Grow geometrically for fragmented records, never past max.
			nb := make([]byte, off, min(rr.max, max(off+n, 2*cap(buf))))
			copy(nb, buf)
			buf = nb
		}
		buf = buf[:off+n]
		if _, err := io.ReadFull(rr.r, buf[off:]); err != nil {
			return buf[:off], inFragment(err)
		}
		if h&lastFragment != 0 {
			return buf, nil
		}
		var err error
		if h, err = rr.readHeader(true); err != nil {
			return buf, err
		}
	}
}

// inFragment is the error of a read inside a fragment: the stream ending
// there is ErrMalformed wrapping io.ErrUnexpectedEOF.
func inFragment(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: stream ended inside a fragment: %w", ErrMalformed, io.ErrUnexpectedEOF)
	}
	return err
}

// recordWriter writes a Message as one single-fragment record with one
// gathered write (writev): header, Head, Payload, pad, Tail. The Payload is
// never copied. Not safe for concurrent use.
//
// With coalesce (a TLS session, where each write is a TLS record of its
// own) the pieces are copied into one write, except a Payload over
// coalesceMax bytes, written by itself between the pieces before and after
// it.
type recordWriter struct {
	conn     net.Conn
	coalesce bool
	hdr      [4]byte
	backing  [5][]byte
	bufs     net.Buffers
	scratch  []byte // coalesce's buffer
}

// coalesceMax is the largest Payload a coalescing recordWriter copies.
const coalesceMax = 16 << 10

// write sends m; it returns the bytes written, header included.
func (w *recordWriter) write(m *Message) (int64, error) {
	n := m.Len()
	if n > maxFragmentLen {
		return 0, fmt.Errorf("%w: message of %d bytes exceeds a fragment (RFC 5531 section 11)", ErrRecordTooLarge, n)
	}
	binary.BigEndian.PutUint32(w.hdr[:], lastFragment|uint32(n))
	if w.coalesce {
		return w.writeCoalesced(m)
	}
	w.bufs = append(w.backing[:0], w.hdr[:], m.Head)
	if m.HasPayload {
		w.bufs = append(w.bufs, m.Payload, zeroPad[:xdr.Pad(len(m.Payload))])
	}
	w.bufs = append(w.bufs, m.Tail)
	k, err := w.bufs.WriteTo(w.conn)
	clear(w.backing[:])
	w.bufs = nil
	return k, err
}

// writeCoalesced is write for a coalescing writer, once w.hdr is set.
func (w *recordWriter) writeCoalesced(m *Message) (int64, error) {
	b := append(w.scratch[:0], w.hdr[:]...)
	b = append(b, m.Head...)
	var total int64
	if m.HasPayload {
		if len(m.Payload) > coalesceMax {
			k, err := w.conn.Write(b)
			total += int64(k)
			if err != nil {
				return total, err
			}
			k, err = w.conn.Write(m.Payload)
			total += int64(k)
			if err != nil {
				return total, err
			}
			b = b[:0]
		} else {
			b = append(b, m.Payload...)
		}
		b = append(b, zeroPad[:xdr.Pad(len(m.Payload))]...)
	}
	b = append(b, m.Tail...)
	var err error
	if len(b) > 0 {
		var k int
		k, err = w.conn.Write(b)
		total += int64(k)
	}
	if cap(b) <= 2*coalesceMax {
		w.scratch = b[:0]
	}
	return total, err
}
