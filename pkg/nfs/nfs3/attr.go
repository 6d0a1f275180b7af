package nfs3

import (
	"fmt"
	"io/fs"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Fattr is fattr3 (RFC 1813 section 2.5), the attributes of a file: 84
// bytes on the wire (FattrSize), in this field order.
type Fattr struct {
	Type   FileType // ftype3, 4 bytes (any value is accepted)
	Mode   uint32   // mode3, 4 bytes: permission bits, see ModeSetUID...
	Nlink  uint32   // 4 bytes
	UID    uint32   // uid3, 4 bytes
	GID    uint32   // gid3, 4 bytes
	Size   uint64   // size3, 8 bytes
	Used   uint64   // size3, 8 bytes: disk space used
	Rdev   SpecData // specdata3, 8 bytes
	FSID   uint64   // 8 bytes
	FileID uint64   // fileid3, 8 bytes
	Atime  Time     // nfstime3, 8 bytes
	Mtime  Time     // nfstime3, 8 bytes
	Ctime  Time     // nfstime3, 8 bytes
}

// FileMode returns the type and permission bits of a as an fs.FileMode.
func (a *Fattr) FileMode() fs.FileMode {
	m := a.Type.FileMode() | fs.FileMode(a.Mode&0o777)
	if a.Mode&ModeSetUID != 0 {
		m |= fs.ModeSetuid
	}
	if a.Mode&ModeSetGID != 0 {
		m |= fs.ModeSetgid
	}
	if a.Mode&ModeSticky != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Encode writes the 84 bytes of a.
func (a *Fattr) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(a.Type))
	e.Uint32(a.Mode)
	e.Uint32(a.Nlink)
	e.Uint32(a.UID)
	e.Uint32(a.GID)
	e.Uint64(a.Size)
	e.Uint64(a.Used)
	a.Rdev.Encode(e)
	e.Uint64(a.FSID)
	e.Uint64(a.FileID)
	a.Atime.Encode(e)
	a.Mtime.Encode(e)
	a.Ctime.Encode(e)
}

// Decode reads 84 bytes into a.
func (a *Fattr) Decode(d *xdr.Decoder) error {
	a.Type = FileType(d.Uint32())
	a.Mode = d.Uint32()
	a.Nlink = d.Uint32()
	a.UID = d.Uint32()
	a.GID = d.Uint32()
	a.Size = d.Uint64()
	a.Used = d.Uint64()
	a.Rdev.Decode(d)
	a.FSID = d.Uint64()
	a.FileID = d.Uint64()
	a.Atime.Decode(d)
	a.Mtime.Decode(d)
	a.Ctime.Decode(d)
	return d.Err()
}

// PostOpAttr is post_op_attr (RFC 1813 section 2.5): optional attributes,
// a 4-byte boolean then, if Set, an 84-byte fattr3 (4 or 88 bytes).
// Decode zeroes Attr when the attributes are absent.
type PostOpAttr struct {
	Set  bool // attributes_follow
	Attr Fattr
}

// Attrs returns a PostOpAttr carrying a.
func Attrs(a Fattr) PostOpAttr { return PostOpAttr{Set: true, Attr: a} }

// Encode writes the boolean and, if Set, the attributes.
func (p *PostOpAttr) Encode(e *xdr.Encoder) {
	e.Bool(p.Set)
	if p.Set {
		p.Attr.Encode(e)
	}
}

// Decode reads the boolean and, if true, the attributes.
func (p *PostOpAttr) Decode(d *xdr.Decoder) error {
	p.Set = d.Bool()
	if p.Set {
		p.Attr.Decode(d)
	} else {
		p.Attr = Fattr{}
	}
	return d.Err()
}

// WccAttr is wcc_attr (RFC 1813 section 2.5): size, mtime and ctime before
// an operation, 24 bytes.
type WccAttr struct {
	Size  uint64 // size3, 8 bytes
	Mtime Time   // 8 bytes
	Ctime Time   // 8 bytes
}

// Encode writes the 24 bytes of w.
func (w *WccAttr) Encode(e *xdr.Encoder) {
	e.Uint64(w.Size)
	w.Mtime.Encode(e)
	w.Ctime.Encode(e)
}

// Decode reads 24 bytes into w.
func (w *WccAttr) Decode(d *xdr.Decoder) error {
	w.Size = d.Uint64()
	w.Mtime.Decode(d)
	w.Ctime.Decode(d)
	return d.Err()
}

// PreOpAttr is pre_op_attr (RFC 1813 section 2.5): a 4-byte boolean then,
// if Set, a 24-byte wcc_attr (4 or 28 bytes).
type PreOpAttr struct {
	Set  bool // attributes_follow
	Attr WccAttr
}

// Encode writes the boolean and, if Set, the attributes.
func (p *PreOpAttr) Encode(e *xdr.Encoder) {
	e.Bool(p.Set)
	if p.Set {
		p.Attr.Encode(e)
	}
}

// Decode reads the boolean and, if true, the attributes.
func (p *PreOpAttr) Decode(d *xdr.Decoder) error {
	p.Set = d.Bool()
	if p.Set {
		p.Attr.Decode(d)
	} else {
		p.Attr = WccAttr{}
	}
	return d.Err()
}

// WccData is wcc_data (RFC 1813 section 2.5): weak cache consistency data,
// attributes before and after an operation, 8 to 116 bytes.
type WccData struct {
	Before PreOpAttr
	After  PostOpAttr
}

// Encode writes before and after.
func (w *WccData) Encode(e *xdr.Encoder) {
	w.Before.Encode(e)
	w.After.Encode(e)
}

// Decode reads before and after.
func (w *WccData) Decode(d *xdr.Decoder) error {
	w.Before.Decode(d)
	w.After.Decode(d)
	return d.Err()
}

// PostOpFH is post_op_fh3 (RFC 1813 section 2.5): an optional file handle,
// a 4-byte boolean then, if Set, an nfs_fh3 (4 or 8..72 bytes).
type PostOpFH struct {
	Set bool // handle_follows
	FH  FH
}

// Handle returns a PostOpFH carrying h.
func Handle(h FH) PostOpFH { return PostOpFH{Set: true, FH: h} }

// Encode writes the boolean and, if Set, the handle.
func (p *PostOpFH) Encode(e *xdr.Encoder) {
	e.Bool(p.Set)
	if p.Set {
		p.FH.Encode(e)
	}
}

// Decode reads the boolean and, if true, the handle.
func (p *PostOpFH) Decode(d *xdr.Decoder) error {
	p.Set = d.Bool()
	if p.Set {
		p.FH.Decode(d)
	} else {
		p.FH = FH{}
	}
	return d.Err()
}

// TimeHow is time_how (RFC 1813 section 2.5), the discriminant of set_atime
// and set_mtime, a 4-byte enum.
type TimeHow uint32

// time_how values.
const (
	DontChange      TimeHow = 0 // DONT_CHANGE
	SetToServerTime TimeHow = 1 // SET_TO_SERVER_TIME
	SetToClientTime TimeHow = 2 // SET_TO_CLIENT_TIME
)

func (h TimeHow) String() string {
	switch h {
	case DontChange:
		return "DONT_CHANGE"
	case SetToServerTime:
		return "SET_TO_SERVER_TIME"
	case SetToClientTime:
		return "SET_TO_CLIENT_TIME"
	}
	return fmt.Sprintf("TIME_HOW(%d)", uint32(h))
}

// SetTime is set_atime or set_mtime (RFC 1813 section 2.5): a 4-byte
// time_how, then with SET_TO_CLIENT_TIME an 8-byte nfstime3 (4 or 12 bytes).
// Time is ignored by Encode and zeroed by Decode for the other values.
type SetTime struct {
	How  TimeHow
	Time Time
}

// Encode writes the discriminant and, for SET_TO_CLIENT_TIME, the time.
func (s *SetTime) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(s.How))
	if s.How == SetToClientTime {
		s.Time.Encode(e)
	}
}

// Decode reads the union; an unknown time_how is xdr.ErrBadDiscriminant.
func (s *SetTime) Decode(d *xdr.Decoder) error {
	*s = SetTime{How: TimeHow(d.Uint32())}
	switch s.How {
	case DontChange, SetToServerTime:
	case SetToClientTime:
		s.Time.Decode(d)
	default:
		d.SetErr(fmt.Errorf("%w: time_how %d", xdr.ErrBadDiscriminant, uint32(s.How)))
	}
	return d.Err()
}

// Sattr is sattr3 (RFC 1813 section 2.5), the attributes to set: each of
// set_mode3, set_uid3, set_gid3 (4 or 8 bytes), set_size3 (4 or 12 bytes)
// is a 4-byte boolean and, if true, the value; set_atime and set_mtime are
// SetTime. 24 to 60 bytes on the wire (SattrMaxSize). A value whose Set
// flag is false is ignored by Encode and zeroed by Decode.
type Sattr struct {
	SetMode bool
	Mode    uint32 // mode3
	SetUID  bool
	UID     uint32 // uid3
	SetGID  bool
	GID     uint32 // gid3
	SetSize bool
	Size    uint64 // size3
	Atime   SetTime
	Mtime   SetTime
}

// Encode writes the six unions.
func (s *Sattr) Encode(e *xdr.Encoder) {
	e.Bool(s.SetMode)
	if s.SetMode {
		e.Uint32(s.Mode)
	}
	e.Bool(s.SetUID)
	if s.SetUID {
		e.Uint32(s.UID)
	}
	e.Bool(s.SetGID)
	if s.SetGID {
		e.Uint32(s.GID)
	}
	e.Bool(s.SetSize)
	if s.SetSize {
		e.Uint64(s.Size)
	}
	s.Atime.Encode(e)
	s.Mtime.Encode(e)
}

// Decode reads the six unions.
func (s *Sattr) Decode(d *xdr.Decoder) error {
	*s = Sattr{}
	if s.SetMode = d.Bool(); s.SetMode {
		s.Mode = d.Uint32()
	}
	if s.SetUID = d.Bool(); s.SetUID {
		s.UID = d.Uint32()
	}
	if s.SetGID = d.Bool(); s.SetGID {
		s.GID = d.Uint32()
	}
	if s.SetSize = d.Bool(); s.SetSize {
		s.Size = d.Uint64()
	}
	s.Atime.Decode(d)
	s.Mtime.Decode(d)
	return d.Err()
}

// SattrGuard is sattrguard3 (RFC 1813 section 3.3.2): a 4-byte boolean
// then, if Check, the 8-byte ctime the object must still have (4 or 12
// bytes). Ctime is ignored by Encode and zeroed by Decode without Check.
type SattrGuard struct {
	Check bool
	Ctime Time // obj_ctime
}

// Encode writes the boolean and, if Check, the time.
func (g *SattrGuard) Encode(e *xdr.Encoder) {
	e.Bool(g.Check)
	if g.Check {
		g.Ctime.Encode(e)
	}
}

// Decode reads the boolean and, if true, the time.
func (g *SattrGuard) Decode(d *xdr.Decoder) error {
	*g = SattrGuard{Check: d.Bool()}
	if g.Check {
		g.Ctime.Decode(d)
	}
	return d.Err()
}
