package nfs3

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Results of the procedures (RFC 1813 section 3.3), except READDIR and
// READDIRPLUS (dirent.go). NULL returns nothing (void, 0 bytes) and has no
// type. Each result is a union on a 4-byte nfsstat3: Encode writes the
// resok arm when Status is OK and the resfail arm otherwise; Decode zeroes
// the struct, reads the status and the arm it selects (every non-OK value
// selects resfail, as the union's default arm). Each type's documentation
// names the fields of each arm and the largest encoding (MaxResultSize).

// GetattrRes is GETATTR3res (RFC 1813 section 3.3.1). resok: Attr
// (obj_attributes, 84 bytes); resfail: nothing. At most 88 bytes.
type GetattrRes struct {
	Status Status
	Attr   Fattr
}

// Encode writes r.
func (r *GetattrRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	if r.Status == OK {
		r.Attr.Encode(e)
	}
}

// Decode reads r.
func (r *GetattrRes) Decode(d *xdr.Decoder) error {
	*r = GetattrRes{Status: Status(d.Uint32())}
	if r.Status == OK {
		r.Attr.Decode(d)
	}
	return d.Err()
}

// SetattrRes is SETATTR3res (RFC 1813 section 3.3.2). Both arms: Wcc
// (obj_wcc). At most 120 bytes.
type SetattrRes struct {
	Status Status
	Wcc    WccData
}

// Encode writes r.
func (r *SetattrRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Wcc.Encode(e)
}

// Decode reads r.
func (r *SetattrRes) Decode(d *xdr.Decoder) error {
	*r = SetattrRes{Status: Status(d.Uint32())}
	r.Wcc.Decode(d)
	return d.Err()
}

// LookupRes is LOOKUP3res (RFC 1813 section 3.3.3). resok: Object,
// ObjAttr, DirAttr; resfail: DirAttr. At most 248 bytes.
type LookupRes struct {
	Status  Status
	Object  FH         // resok
	ObjAttr PostOpAttr // resok: obj_attributes
	DirAttr PostOpAttr // dir_attributes
}

// Encode writes r.
func (r *LookupRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	if r.Status == OK {
		r.Object.Encode(e)
		r.ObjAttr.Encode(e)
	}
	r.DirAttr.Encode(e)
}

// Decode reads r.
func (r *LookupRes) Decode(d *xdr.Decoder) error {
	*r = LookupRes{Status: Status(d.Uint32())}
	if r.Status == OK {
		r.Object.Decode(d)
		r.ObjAttr.Decode(d)
	}
	r.DirAttr.Decode(d)
	return d.Err()
}

// AccessRes is ACCESS3res (RFC 1813 section 3.3.4). resok: Attr, Access;
// resfail: Attr. At most 96 bytes.
type AccessRes struct {
	Status Status
	Attr   PostOpAttr // obj_attributes
	Access uint32     // resok: the granted subset of the requested bits
}

// Encode writes r.
func (r *AccessRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Attr.Encode(e)
	if r.Status == OK {
		e.Uint32(r.Access)
	}
}

// Decode reads r.
func (r *AccessRes) Decode(d *xdr.Decoder) error {
	*r = AccessRes{Status: Status(d.Uint32())}
	r.Attr.Decode(d)
	if r.Status == OK {
		r.Access = d.Uint32()
	}
	return d.Err()
}

// ReadlinkRes is READLINK3res (RFC 1813 section 3.3.5). resok: Attr
// (symlink_attributes), Path (data, an nfspath3 of at most MaxPathLen bytes
// on decode); resfail: Attr. At most 96 bytes without the path's bytes.
//
// Path is DDP-eligible (RFC 8267 section 4) and the last item. Encode
// writes everything up to and including its length word and returns Path,
// unappended and without padding: the responder RDMA-Writes it into the
// requester's Write chunk, or (TCP, or no chunk used) sends it right after
// the head followed by xdr.Pad(len(Path)) zero bytes. EncodeInline writes it
// all. Decode reads the length word; with placed true, Path is
// payload[:length] (payload, what the transport received in the Write
// chunk, must hold at least length bytes; the rest is ignored); with placed
// false, Path is read inline with its padding from d. Path aliases payload
// or d's input; nothing is copied. For a non-OK status there is no path:
// Encode returns nil and Decode ignores payload.
type ReadlinkRes struct {
	Status Status
	Attr   PostOpAttr // symlink_attributes
	Path   []byte     // resok: data, DDP-eligible
}

// Encode writes r up to the path's length word and returns r.Path (see ReadlinkRes).
func (r *ReadlinkRes) Encode(e *xdr.Encoder) (payload []byte) {
	e.Uint32(uint32(r.Status))
	r.Attr.Encode(e)
	if r.Status != OK {
		return nil
	}
	return encodeDDP(e, r.Path)
}

// EncodeInline writes all of r, path and padding included.
func (r *ReadlinkRes) EncodeInline(e *xdr.Encoder) { e.Fixed(r.Encode(e)) }

// Decode reads r (see ReadlinkRes).
func (r *ReadlinkRes) Decode(d *xdr.Decoder, payload []byte, placed bool) error {
	*r = ReadlinkRes{Status: Status(d.Uint32())}
	r.Attr.Decode(d)
	if r.Status == OK {
		r.Path = decodeDDP(d, payload, placed, MaxPathLen, "READLINK path")
	}
	return d.Err()
}

// ReadRes is READ3res (RFC 1813 section 3.3.6). resok: Attr
// (file_attributes), count, EOF, Data; resfail: Attr. The count field is
// always encoded as len(Data), and Decode refuses a count different from
// the data length (ErrCountMismatch). At most 104 bytes without the data's
// bytes.
//
// Data is DDP-eligible (RFC 8267 section 4) and the last item. Encode
// writes everything up to and including its length word and returns Data,
// unappended and without padding: the responder RDMA-Writes it into the
// requester's Write chunk, or (TCP, or no chunk used) sends it right after
// the head followed by xdr.Pad(len(Data)) zero bytes. EncodeInline writes it
// all. Decode (at most DefaultMaxData bytes) and DecodeMax read the length
// word; with placed true, Data is payload[:length] (payload, the bytes the
// transport received in the Write chunk, must hold at least length bytes;
// the rest is ignored); with placed false, Data is read inline with its
// padding from d. Data aliases payload or d's input; nothing is copied. For
// a non-OK status there is no data: Encode returns nil and Decode ignores
// payload.
type ReadRes struct {
	Status Status
	Attr   PostOpAttr // file_attributes
	EOF    bool       // resok
	Data   []byte     // resok: DDP-eligible
}

// Encode writes r up to the data's length word and returns r.Data (see ReadRes).
func (r *ReadRes) Encode(e *xdr.Encoder) (payload []byte) {
	e.Uint32(uint32(r.Status))
	r.Attr.Encode(e)
	if r.Status != OK {
		return nil
	}
	e.Uint32(uint32(len(r.Data)))
	e.Bool(r.EOF)
	return encodeDDP(e, r.Data)
}

// EncodeInline writes all of r, data and padding included.
func (r *ReadRes) EncodeInline(e *xdr.Encoder) { e.Fixed(r.Encode(e)) }

// Decode reads r with data of at most DefaultMaxData bytes (see ReadRes).
func (r *ReadRes) Decode(d *xdr.Decoder, payload []byte, placed bool) error {
	return r.DecodeMax(d, payload, placed, DefaultMaxData)
}

// DecodeMax is Decode with data of at most max bytes; a client passes the
// count it asked for.
func (r *ReadRes) DecodeMax(d *xdr.Decoder, payload []byte, placed bool, max int) error {
	*r = ReadRes{Status: Status(d.Uint32())}
	r.Attr.Decode(d)
	if r.Status != OK {
		return d.Err()
	}
	count := d.Uint32()
	r.EOF = d.Bool()
	r.Data = decodeDDP(d, payload, placed, max, "READ data")
	if d.Err() == nil && uint64(count) != uint64(len(r.Data)) {
		d.SetErr(fmt.Errorf("%w: READ count %d, data %d bytes", ErrCountMismatch, count, len(r.Data)))
	}
	return d.Err()
}

// WriteRes is WRITE3res (RFC 1813 section 3.3.7). resok: Wcc (file_wcc),
// Count, Committed, Verf; resfail: Wcc. At most 136 bytes.
type WriteRes struct {
	Status    Status
	Wcc       WccData   // file_wcc
	Count     uint32    // resok: bytes written
	Committed StableHow // resok
	Verf      WriteVerf // resok
}

// Encode writes r.
func (r *WriteRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Wcc.Encode(e)
	if r.Status == OK {
		e.Uint32(r.Count)
		e.Uint32(uint32(r.Committed))
		e.Fixed(r.Verf[:])
	}
}

// Decode reads r.
func (r *WriteRes) Decode(d *xdr.Decoder) error {
	*r = WriteRes{Status: Status(d.Uint32())}
	r.Wcc.Decode(d)
	if r.Status == OK {
		r.Count = d.Uint32()
		r.Committed = decodeStableHow(d)
		copy(r.Verf[:], d.Fixed(WriteVerfSize))
	}
	return d.Err()
}

// CreateRes is CREATE3res (RFC 1813 section 3.3.8), and also MKDIR3res,
// SYMLINK3res and MKNOD3res (sections 3.3.9-3.3.11), which have the same
// arms. resok: Obj, ObjAttr, DirWcc; resfail: DirWcc. At most 280 bytes.
type CreateRes struct {
	Status  Status
	Obj     PostOpFH   // resok: obj
	ObjAttr PostOpAttr // resok: obj_attributes
	DirWcc  WccData    // dir_wcc
}

// MkdirRes is MKDIR3res (RFC 1813 section 3.3.9), the same as CREATE3res.
type MkdirRes = CreateRes

// SymlinkRes is SYMLINK3res (RFC 1813 section 3.3.10), the same as CREATE3res.
type SymlinkRes = CreateRes

// MknodRes is MKNOD3res (RFC 1813 section 3.3.11), the same as CREATE3res.
type MknodRes = CreateRes

// Encode writes r.
func (r *CreateRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	if r.Status == OK {
		r.Obj.Encode(e)
		r.ObjAttr.Encode(e)
	}
	r.DirWcc.Encode(e)
}

// Decode reads r.
func (r *CreateRes) Decode(d *xdr.Decoder) error {
	*r = CreateRes{Status: Status(d.Uint32())}
	if r.Status == OK {
		r.Obj.Decode(d)
		r.ObjAttr.Decode(d)
	}
	r.DirWcc.Decode(d)
	return d.Err()
}

// RemoveRes is REMOVE3res (RFC 1813 section 3.3.12), and also RMDIR3res
// (section 3.3.13). Both arms: DirWcc (dir_wcc). At most 120 bytes.
type RemoveRes struct {
	Status Status
	DirWcc WccData
}

// RmdirRes is RMDIR3res (RFC 1813 section 3.3.13), the same as REMOVE3res.
type RmdirRes = RemoveRes

// Encode writes r.
func (r *RemoveRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.DirWcc.Encode(e)
}

// Decode reads r.
func (r *RemoveRes) Decode(d *xdr.Decoder) error {
	*r = RemoveRes{Status: Status(d.Uint32())}
	r.DirWcc.Decode(d)
	return d.Err()
}

// RenameRes is RENAME3res (RFC 1813 section 3.3.14). Both arms:
// FromDirWcc, ToDirWcc. At most 236 bytes.
type RenameRes struct {
	Status     Status
	FromDirWcc WccData // fromdir_wcc
	ToDirWcc   WccData // todir_wcc
}

// Encode writes r.
func (r *RenameRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.FromDirWcc.Encode(e)
	r.ToDirWcc.Encode(e)
}

// Decode reads r.
func (r *RenameRes) Decode(d *xdr.Decoder) error {
	*r = RenameRes{Status: Status(d.Uint32())}
	r.FromDirWcc.Decode(d)
	r.ToDirWcc.Decode(d)
	return d.Err()
}

// LinkRes is LINK3res (RFC 1813 section 3.3.15). Both arms: FileAttr,
// LinkDirWcc. At most 208 bytes.
type LinkRes struct {
	Status     Status
	FileAttr   PostOpAttr // file_attributes
	LinkDirWcc WccData    // linkdir_wcc
}

// Encode writes r.
func (r *LinkRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.FileAttr.Encode(e)
	r.LinkDirWcc.Encode(e)
}

// Decode reads r.
func (r *LinkRes) Decode(d *xdr.Decoder) error {
	*r = LinkRes{Status: Status(d.Uint32())}
	r.FileAttr.Decode(d)
	r.LinkDirWcc.Decode(d)
	return d.Err()
}

// FsstatRes is FSSTAT3res (RFC 1813 section 3.3.18). resok: Attr and the
// counters (6 x 8 bytes, then 4); resfail: Attr. At most 144 bytes.
type FsstatRes struct {
	Status   Status
	Attr     PostOpAttr // obj_attributes
	TBytes   uint64     // resok: total bytes
	FBytes   uint64     // resok: free bytes
	ABytes   uint64     // resok: bytes available to the caller
	TFiles   uint64     // resok: total file slots
	FFiles   uint64     // resok: free file slots
	AFiles   uint64     // resok: file slots available to the caller
	Invarsec uint32     // resok: seconds the values are expected not to change
}

// Encode writes r.
func (r *FsstatRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Attr.Encode(e)
	if r.Status == OK {
		e.Uint64(r.TBytes)
		e.Uint64(r.FBytes)
		e.Uint64(r.ABytes)
		e.Uint64(r.TFiles)
		e.Uint64(r.FFiles)
		e.Uint64(r.AFiles)
		e.Uint32(r.Invarsec)
	}
}

// Decode reads r.
func (r *FsstatRes) Decode(d *xdr.Decoder) error {
	*r = FsstatRes{Status: Status(d.Uint32())}
	r.Attr.Decode(d)
	if r.Status == OK {
		r.TBytes = d.Uint64()
		r.FBytes = d.Uint64()
		r.ABytes = d.Uint64()
		r.TFiles = d.Uint64()
		r.FFiles = d.Uint64()
		r.AFiles = d.Uint64()
		r.Invarsec = d.Uint32()
	}
	return d.Err()
}

// FsinfoRes is FSINFO3res (RFC 1813 section 3.3.19). resok: Attr, then
// rtmax, rtpref, rtmult, wtmax, wtpref, wtmult, dtpref (4 bytes each),
// maxfilesize (8), time_delta (8), properties (4); resfail: Attr. At most
// 140 bytes.
type FsinfoRes struct {
	Status      Status
	Attr        PostOpAttr // obj_attributes
	RTMax       uint32     // resok: largest READ count
	RTPref      uint32     // resok: preferred READ count
	RTMult      uint32     // resok: suggested READ count multiple
	WTMax       uint32     // resok: largest WRITE count
	WTPref      uint32     // resok: preferred WRITE count
	WTMult      uint32     // resok: suggested WRITE count multiple
	DTPref      uint32     // resok: preferred READDIR count
	MaxFileSize uint64     // resok
	TimeDelta   Time       // resok: server time granularity
	Properties  uint32     // resok: FSFLink | FSFSymlink | ...
}

// Encode writes r.
func (r *FsinfoRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Attr.Encode(e)
	if r.Status == OK {
		e.Uint32(r.RTMax)
		e.Uint32(r.RTPref)
		e.Uint32(r.RTMult)
		e.Uint32(r.WTMax)
		e.Uint32(r.WTPref)
		e.Uint32(r.WTMult)
		e.Uint32(r.DTPref)
		e.Uint64(r.MaxFileSize)
		r.TimeDelta.Encode(e)
		e.Uint32(r.Properties)
	}
}

// Decode reads r.
func (r *FsinfoRes) Decode(d *xdr.Decoder) error {
	*r = FsinfoRes{Status: Status(d.Uint32())}
	r.Attr.Decode(d)
	if r.Status == OK {
		r.RTMax = d.Uint32()
		r.RTPref = d.Uint32()
		r.RTMult = d.Uint32()
		r.WTMax = d.Uint32()
		r.WTPref = d.Uint32()
		r.WTMult = d.Uint32()
		r.DTPref = d.Uint32()
		r.MaxFileSize = d.Uint64()
		r.TimeDelta.Decode(d)
		r.Properties = d.Uint32()
	}
	return d.Err()
}

// PathconfRes is PATHCONF3res (RFC 1813 section 3.3.20). resok: Attr,
// linkmax, name_max (4 bytes each), then four 4-byte booleans; resfail:
// Attr. At most 116 bytes.
type PathconfRes struct {
	Status          Status
	Attr            PostOpAttr // obj_attributes
	LinkMax         uint32     // resok
	NameMax         uint32     // resok
	NoTrunc         bool       // resok
	ChownRestricted bool       // resok
	CaseInsensitive bool       // resok
	CasePreserving  bool       // resok
}

// Encode writes r.
func (r *PathconfRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Attr.Encode(e)
	if r.Status == OK {
		e.Uint32(r.LinkMax)
		e.Uint32(r.NameMax)
		e.Bool(r.NoTrunc)
		e.Bool(r.ChownRestricted)
		e.Bool(r.CaseInsensitive)
		e.Bool(r.CasePreserving)
	}
}

// Decode reads r.
func (r *PathconfRes) Decode(d *xdr.Decoder) error {
	*r = PathconfRes{Status: Status(d.Uint32())}
	r.Attr.Decode(d)
	if r.Status == OK {
		r.LinkMax = d.Uint32()
		r.NameMax = d.Uint32()
		r.NoTrunc = d.Bool()
		r.ChownRestricted = d.Bool()
		r.CaseInsensitive = d.Bool()
		r.CasePreserving = d.Bool()
	}
	return d.Err()
}

// CommitRes is COMMIT3res (RFC 1813 section 3.3.21). resok: Wcc
// (file_wcc), Verf; resfail: Wcc. At most 128 bytes.
type CommitRes struct {
	Status Status
	Wcc    WccData   // file_wcc
	Verf   WriteVerf // resok
}

// Encode writes r.
func (r *CommitRes) Encode(e *xdr.Encoder) {
	e.Uint32(uint32(r.Status))
	r.Wcc.Encode(e)
	if r.Status == OK {
		e.Fixed(r.Verf[:])
	}
}

// Decode reads r.
func (r *CommitRes) Decode(d *xdr.Decoder) error {
	*r = CommitRes{Status: Status(d.Uint32())}
	r.Wcc.Decode(d)
	if r.Status == OK {
		copy(r.Verf[:], d.Fixed(WriteVerfSize))
	}
	return d.Err()
}
