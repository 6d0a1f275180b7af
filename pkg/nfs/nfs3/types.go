package nfs3

import (
	"encoding/hex"
	"fmt"
	"io/fs"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FH is nfs_fh3 (RFC 1813 section 2.5): an opaque file handle of 0 to 64
// bytes, on the wire a 4-byte length, the bytes and padding (4 to 68 bytes).
//
// FH is a comparable value, usable as a map key: it holds the bytes in a
// fixed array (bytes past the length are always zero), so decoding one
// allocates nothing. The zero FH is the empty handle.
type FH struct {
	n uint8
	b [FHSize]byte
}

// NewFH returns the handle holding a copy of b; it fails if b is longer than
// 64 bytes.
func NewFH(b []byte) (FH, error) {
	var h FH
	if len(b) > FHSize {
		return h, fmt.Errorf("nfs3: file handle of %d bytes, maximum %d: %w", len(b), FHSize, xdr.ErrTooLong)
	}
	h.n = uint8(copy(h.b[:], b))
	return h, nil
}

// MustFH is NewFH that panics on a handle longer than 64 bytes; for tests and constants.
func MustFH(b []byte) FH {
	h, err := NewFH(b)
	if err != nil {
		panic(err)
	}
	return h
}

// Len returns the handle's length in bytes (0..64).
func (h FH) Len() int { return int(h.n) }

// Bytes returns the handle's bytes, aliasing h: do not modify them.
func (h *FH) Bytes() []byte { return h.b[:h.n:h.n] }

// IsEmpty reports whether the handle has no bytes.
func (h FH) IsEmpty() bool { return h.n == 0 }

// String returns the handle in hexadecimal.
func (h FH) String() string { return hex.EncodeToString(h.b[:h.n]) }

// Encode writes the handle: length, bytes, padding (4..68 bytes).
func (h *FH) Encode(e *xdr.Encoder) { e.Opaque(h.b[:h.n]) }

// Decode reads a handle of at most 64 bytes into h.
func (h *FH) Decode(d *xdr.Decoder) error {
	b := d.Opaque(FHSize)
	*h = FH{}
	h.n = uint8(copy(h.b[:], b))
	return d.Err()
}

// Time is nfstime3 (RFC 1813 section 2.5): seconds and nanoseconds since
// 1970-01-01 UTC, two 4-byte unsigned integers, 8 bytes.
type Time struct {
	Seconds  uint32
	Nseconds uint32
}

// TimeOf converts t to nfstime3, truncating seconds to 32 bits.
func TimeOf(t time.Time) Time {
	return Time{Seconds: uint32(t.Unix()), Nseconds: uint32(t.Nanosecond())}
}

// GoTime converts t to a time.Time.
func (t Time) GoTime() time.Time { return time.Unix(int64(t.Seconds), int64(t.Nseconds)) }

// Encode writes the 8 bytes of t.
func (t *Time) Encode(e *xdr.Encoder) {
	e.Uint32(t.Seconds)
	e.Uint32(t.Nseconds)
}

// Decode reads 8 bytes into t.
func (t *Time) Decode(d *xdr.Decoder) error {
	t.Seconds = d.Uint32()
	t.Nseconds = d.Uint32()
	return d.Err()
}

// SpecData is specdata3 (RFC 1813 section 2.5): the major and minor device
// numbers of a block or character special file, 8 bytes.
type SpecData struct {
	Major uint32 // specdata1
	Minor uint32 // specdata2
}

// Encode writes the 8 bytes of s.
func (s *SpecData) Encode(e *xdr.Encoder) {
	e.Uint32(s.Major)
	e.Uint32(s.Minor)
}

// Decode reads 8 bytes into s.
func (s *SpecData) Decode(d *xdr.Decoder) error {
	s.Major = d.Uint32()
	s.Minor = d.Uint32()
	return d.Err()
}

// FileType is ftype3 (RFC 1813 section 2.5), a 4-byte enum.
type FileType uint32

// ftype3 values.
const (
	TypeReg  FileType = 1 // NF3REG: regular file
	TypeDir  FileType = 2 // NF3DIR: directory
	TypeBlk  FileType = 3 // NF3BLK: block special device
	TypeChr  FileType = 4 // NF3CHR: character special device
	TypeLnk  FileType = 5 // NF3LNK: symbolic link
	TypeSock FileType = 6 // NF3SOCK: socket
	TypeFIFO FileType = 7 // NF3FIFO: named pipe
)

func (t FileType) String() string {
	switch t {
	case TypeReg:
		return "NF3REG"
	case TypeDir:
		return "NF3DIR"
	case TypeBlk:
		return "NF3BLK"
	case TypeChr:
		return "NF3CHR"
	case TypeLnk:
		return "NF3LNK"
	case TypeSock:
		return "NF3SOCK"
	case TypeFIFO:
		return "NF3FIFO"
	}
	return fmt.Sprintf("NF3TYPE(%d)", uint32(t))
}

// FileMode returns the io/fs type bits of t (0 for a regular file or an
// unknown type).
func (t FileType) FileMode() fs.FileMode {
	switch t {
	case TypeDir:
		return fs.ModeDir
	case TypeBlk:
		return fs.ModeDevice
	case TypeChr:
		return fs.ModeDevice | fs.ModeCharDevice
	case TypeLnk:
		return fs.ModeSymlink
	case TypeSock:
		return fs.ModeSocket
	case TypeFIFO:
		return fs.ModeNamedPipe
	}
	return 0
}

// CookieVerf is cookieverf3 (RFC 1813 section 2.5), 8 opaque bytes.
type CookieVerf [CookieVerfSize]byte

// CreateVerf is createverf3 (RFC 1813 section 2.5), 8 opaque bytes.
type CreateVerf [CreateVerfSize]byte

// WriteVerf is writeverf3 (RFC 1813 section 2.5), 8 opaque bytes.
type WriteVerf [WriteVerfSize]byte

// DirOpArgs is diropargs3 (RFC 1813 section 2.5): a directory handle and a
// filename3 in it, 8..328 bytes on the wire. Decoders refuse
// a name longer than MaxNameLen (255) bytes.
type DirOpArgs struct {
	Dir  FH
	Name string
}

// Encode writes the handle and the name.
func (a *DirOpArgs) Encode(e *xdr.Encoder) {
	a.Dir.Encode(e)
	e.String(a.Name)
}

// Decode reads a handle and a name of at most 255 bytes.
func (a *DirOpArgs) Decode(d *xdr.Decoder) error {
	a.Dir.Decode(d)
	a.Name = d.String(MaxNameLen)
	return d.Err()
}

// StableHow is stable_how (RFC 1813 section 3.3.7), a 4-byte enum.
type StableHow uint32

// stable_how values.
const (
	Unstable StableHow = 0 // UNSTABLE
	DataSync StableHow = 1 // DATA_SYNC
	FileSync StableHow = 2 // FILE_SYNC
)

func (s StableHow) String() string {
	switch s {
	case Unstable:
		return "UNSTABLE"
	case DataSync:
		return "DATA_SYNC"
	case FileSync:
		return "FILE_SYNC"
	}
	return fmt.Sprintf("STABLE_HOW(%d)", uint32(s))
}

func decodeStableHow(d *xdr.Decoder) StableHow {
	v := StableHow(d.Uint32())
	if v > FileSync {
		d.SetErr(fmt.Errorf("%w: stable_how %d", xdr.ErrBadDiscriminant, uint32(v)))
		return 0
	}
	return v
}

// CreateMode is createmode3 (RFC 1813 section 3.3.8), a 4-byte enum.
type CreateMode uint32

// createmode3 values.
const (
	Unchecked CreateMode = 0 // UNCHECKED
	Guarded   CreateMode = 1 // GUARDED
	Exclusive CreateMode = 2 // EXCLUSIVE
)

func (m CreateMode) String() string {
	switch m {
	case Unchecked:
		return "UNCHECKED"
	case Guarded:
		return "GUARDED"
	case Exclusive:
		return "EXCLUSIVE"
	}
	return fmt.Sprintf("CREATEMODE(%d)", uint32(m))
}

// CreateHow is createhow3 (RFC 1813 section 3.3.8): a union on Mode; with
// UNCHECKED and GUARDED the initial attributes Attr follow (28..64
// bytes), with EXCLUSIVE the 8-byte verifier Verf (12 bytes). The field of
// the other arm is ignored by Encode and zeroed by Decode.
type CreateHow struct {
	Mode CreateMode
	Attr Sattr      // UNCHECKED, GUARDED: obj_attributes
	Verf CreateVerf // EXCLUSIVE: verf
}

// Encode writes the union arm selected by Mode; a Mode outside
// createmode3 is written as the bare discriminant.
func (c *CreateHow) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(c.Mode))
	switch c.Mode {
	case Unchecked, Guarded:
		c.Attr.Encode(e)
	case Exclusive:
		e.Fixed(c.Verf[:])
	}
}

// Decode reads the union; an unknown mode is xdr.ErrBadDiscriminant.
func (c *CreateHow) Decode(d *xdr.Decoder) error {
	*c = CreateHow{Mode: CreateMode(d.Uint32())}
	switch c.Mode {
	case Unchecked, Guarded:
		c.Attr.Decode(d)
	case Exclusive:
		copy(c.Verf[:], d.Fixed(CreateVerfSize))
	default:
		d.SetErr(fmt.Errorf("%w: createmode3 %d", xdr.ErrBadDiscriminant, uint32(c.Mode)))
	}
	return d.Err()
}
