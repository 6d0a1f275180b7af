// Package xdr encodes and decodes External Data Representation (RFC 4506)
// items: the 4-byte big-endian units that ONC RPC (RFC 5531), RPC-over-RDMA
// (RFC 8166) and NFSv3 (RFC 1813) are written in.
//
// Decoding never copies: opaque and string items are returned as sub-slices
// of the input, valid as long as the input buffer is. Every variable-length
// item is read with an explicit maximum so that a hostile length is refused
// before anything of that size is allocated.
package xdr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors returned by Decoder. They are sentinel values, test them with errors.Is.
var (
	// ErrShort means the input ended inside an item (RFC 4506 section 3:
	// every item is a whole number of 4-byte units).
	ErrShort = errors.New("xdr: input truncated")
	// ErrTooLong means a variable-length item declared a length above the
	// caller's maximum (RFC 4506 section 4.10 "maximum size").
	ErrTooLong = errors.New("xdr: length exceeds maximum")
	// ErrBadBool means a boolean held a value other than 0 or 1 (RFC 4506 section 4.4).
	ErrBadBool = errors.New("xdr: boolean not 0 or 1")
	// ErrBadDiscriminant means a union or enum held a value the caller does not know.
	ErrBadDiscriminant = errors.New("xdr: unknown discriminant")
)

// Pad returns the number of zero bytes that follow n bytes of opaque data
// to round it up to a multiple of 4 (RFC 4506 section 4.9).
func Pad(n int) int { return (4 - n&3) & 3 }

// RoundUp returns n rounded up to a multiple of 4.
func RoundUp(n int) int { return (n + 3) &^ 3 }

// Decoder reads XDR items from a byte slice. The first error sticks: later
// calls return zero values, and Err reports it.
type Decoder struct {
	buf []byte
	off int
	err error
}

// NewDecoder returns a Decoder reading b from its start.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Reset makes d read b from its start and clears any error.
func (d *Decoder) Reset(b []byte) { *d = Decoder{buf: b} }

// Err returns the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Offset returns the number of bytes consumed so far.
func (d *Decoder) Offset() int { return d.off }

// Remaining returns the number of bytes not yet consumed.
func (d *Decoder) Remaining() int { return len(d.buf) - d.off }

// Rest returns the bytes not yet consumed, without consuming them.
func (d *Decoder) Rest() []byte { return d.buf[d.off:] }

// SetErr records err as the decoder's error unless one is already recorded.
// Callers use it to report semantic errors found while decoding.
func (d *Decoder) SetErr(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *Decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.buf)-d.off < n {
		d.err = fmt.Errorf("%w: need %d bytes at offset %d, have %d", ErrShort, n, d.off, len(d.buf)-d.off)
		return false
	}
	return true
}

// Uint32 reads an unsigned integer (RFC 4506 section 4.2).
func (d *Decoder) Uint32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.buf[d.off:])
	d.off += 4
	return v
}

// Int32 reads a signed integer (RFC 4506 section 4.1).
func (d *Decoder) Int32() int32 { return int32(d.Uint32()) }

// Uint64 reads an unsigned hyper integer (RFC 4506 section 4.5).
func (d *Decoder) Uint64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return v
}

// Int64 reads a hyper integer (RFC 4506 section 4.5).
func (d *Decoder) Int64() int64 { return int64(d.Uint64()) }

// Bool reads a boolean (RFC 4506 section 4.4); values other than 0 and 1 are ErrBadBool.
func (d *Decoder) Bool() bool {
	v := d.Uint32()
	if v > 1 {
		d.SetErr(fmt.Errorf("%w: %d", ErrBadBool, v))
		return false
	}
	return v == 1
}

// Fixed reads n bytes of fixed-length opaque data and its padding
// (RFC 4506 section 4.9). The result aliases the input.
func (d *Decoder) Fixed(n int) []byte {
	if !d.need(RoundUp(n)) {
		return nil
	}
	b := d.buf[d.off : d.off+n : d.off+n]
	d.off += RoundUp(n)
	return b
}

// Opaque reads variable-length opaque data of at most max bytes
// (RFC 4506 section 4.10). The result aliases the input.
func (d *Decoder) Opaque(max int) []byte {
	n := d.Uint32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		d.SetErr(fmt.Errorf("%w: %d > %d", ErrTooLong, n, max))
		return nil
	}
	return d.Fixed(int(n))
}

// String reads a string of at most max bytes (RFC 4506 section 4.11). It
// allocates the returned string; use Opaque to avoid that.
func (d *Decoder) String(max int) string { return string(d.Opaque(max)) }

// Encoder appends XDR items to a byte slice. It never fails.
type Encoder struct {
	buf []byte
}

// NewEncoder returns an Encoder appending to b[:0]'s backing array.
func NewEncoder(b []byte) *Encoder { return &Encoder{buf: b[:0]} }

// Reset makes e append to b[:0].
func (e *Encoder) Reset(b []byte) { e.buf = b[:0] }

// Bytes returns the encoded bytes.
func (e *Encoder) Bytes() []byte { return e.buf }

// Len returns the number of encoded bytes.
func (e *Encoder) Len() int { return len(e.buf) }

// Uint32 appends an unsigned integer.
func (e *Encoder) Uint32(v uint32) { e.buf = binary.BigEndian.AppendUint32(e.buf, v) }

// Int32 appends a signed integer.
func (e *Encoder) Int32(v int32) { e.Uint32(uint32(v)) }

// Uint64 appends an unsigned hyper integer.
func (e *Encoder) Uint64(v uint64) { e.buf = binary.BigEndian.AppendUint64(e.buf, v) }

// Int64 appends a hyper integer.
func (e *Encoder) Int64(v int64) { e.Uint64(uint64(v)) }

// Bool appends a boolean as 0 or 1.
func (e *Encoder) Bool(v bool) {
	if v {
		e.Uint32(1)
	} else {
		e.Uint32(0)
	}
}

var zeros [4]byte

// Fixed appends fixed-length opaque data and its zero padding.
func (e *Encoder) Fixed(b []byte) {
	e.buf = append(e.buf, b...)
	e.buf = append(e.buf, zeros[:Pad(len(b))]...)
}

// Opaque appends variable-length opaque data: length, bytes, padding.
func (e *Encoder) Opaque(b []byte) {
	e.Uint32(uint32(len(b)))
	e.Fixed(b)
}

// String appends a string: length, bytes, padding.
func (e *Encoder) String(s string) {
	e.Uint32(uint32(len(s)))
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, zeros[:Pad(len(s))]...)
}
