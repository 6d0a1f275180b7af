package nfs3

import (
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Arguments of the 22 procedures (RFC 1813 section 3.3). NULL takes no
// arguments (void, 0 bytes) and has no type. Sizes are on-the-wire bytes.

// GetattrArgs is GETATTR3args (RFC 1813 section 3.3.1), 4..68 bytes.
type GetattrArgs struct {
	Object FH
}

// Encode writes a.
func (a *GetattrArgs) Encode(e *xdr.Encoder) { a.Object.Encode(e) }

// Decode reads a.
func (a *GetattrArgs) Decode(d *xdr.Decoder) error { return a.Object.Decode(d) }

// SetattrArgs is SETATTR3args (RFC 1813 section 3.3.2), 32..140 bytes.
type SetattrArgs struct {
	Object FH
	Attr   Sattr // new_attributes
	Guard  SattrGuard
}

// Encode writes a.
func (a *SetattrArgs) Encode(e *xdr.Encoder) {
	a.Object.Encode(e)
	a.Attr.Encode(e)
	a.Guard.Encode(e)
}

// Decode reads a.
func (a *SetattrArgs) Decode(d *xdr.Decoder) error {
	a.Object.Decode(d)
	a.Attr.Decode(d)
	a.Guard.Decode(d)
	return d.Err()
}

// LookupArgs is LOOKUP3args (RFC 1813 section 3.3.3), 8..328 bytes.
type LookupArgs struct {
	What DirOpArgs
}

// Encode writes a.
func (a *LookupArgs) Encode(e *xdr.Encoder) { a.What.Encode(e) }

// Decode reads a.
func (a *LookupArgs) Decode(d *xdr.Decoder) error { return a.What.Decode(d) }

// AccessArgs is ACCESS3args (RFC 1813 section 3.3.4), 8..72 bytes.
type AccessArgs struct {
	Object FH
	Access uint32 // AccessRead | AccessLookup | ...
}

// Encode writes a.
func (a *AccessArgs) Encode(e *xdr.Encoder) {
	a.Object.Encode(e)
	e.Uint32(a.Access)
}

// Decode reads a.
func (a *AccessArgs) Decode(d *xdr.Decoder) error {
	a.Object.Decode(d)
	a.Access = d.Uint32()
	return d.Err()
}

// ReadlinkArgs is READLINK3args (RFC 1813 section 3.3.5), 4..68 bytes.
type ReadlinkArgs struct {
	Symlink FH
}

// Encode writes a.
func (a *ReadlinkArgs) Encode(e *xdr.Encoder) { a.Symlink.Encode(e) }

// Decode reads a.
func (a *ReadlinkArgs) Decode(d *xdr.Decoder) error { return a.Symlink.Decode(d) }

// ReadArgs is READ3args (RFC 1813 section 3.3.6), 16..80 bytes.
type ReadArgs struct {
	File   FH
	Offset uint64 // offset3
	Count  uint32 // count3: bytes to read
}

// Encode writes a.
func (a *ReadArgs) Encode(e *xdr.Encoder) {
	a.File.Encode(e)
	e.Uint64(a.Offset)
	e.Uint32(a.Count)
}

// Decode reads a.
func (a *ReadArgs) Decode(d *xdr.Decoder) error {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
	return d.Err()
}

// WriteArgs is WRITE3args (RFC 1813 section 3.3.7): file (4..68 bytes),
// offset (8), count (4), stable (4), data (4-byte length, bytes, padding).
// The count field is always encoded as len(Data), and Decode refuses a
// count different from the data length (ErrCountMismatch).
//
// Data is DDP-eligible (RFC 8267 section 4) and the last item. Encode
// writes everything up to and including data's length word (24..88 bytes)
// and returns Data, unappended and without padding: the transport sends it
// as a Read chunk at XDR position e.Len(), or on TCP right after the head
// followed by xdr.Pad(len(Data)) zero bytes. EncodeInline writes it all.
// Decode (at most DefaultMaxData bytes) and DecodeMax read the length word;
// with placed true, Data is payload[:length] (payload, the bytes the
// transport pulled from the Read chunk, must hold at least length bytes;
// the rest is ignored); with placed false, Data is read inline with its
// padding from d. Data aliases payload or d's input; nothing is copied.
type WriteArgs struct {
	File   FH
	Offset uint64    // offset3
	Stable StableHow // stable
	Data   []byte    // DDP-eligible
}

// Encode writes a up to data's length word and returns a.Data (see WriteArgs).
func (a *WriteArgs) Encode(e *xdr.Encoder) (payload []byte) {
	a.File.Encode(e)
	e.Uint64(a.Offset)
	e.Uint32(uint32(len(a.Data)))
	e.Uint32(uint32(a.Stable))
	return encodeDDP(e, a.Data)
}

// EncodeInline writes all of a, data and padding included.
func (a *WriteArgs) EncodeInline(e *xdr.Encoder) { e.Fixed(a.Encode(e)) }

// Decode reads a with data of at most DefaultMaxData bytes (see WriteArgs).
func (a *WriteArgs) Decode(d *xdr.Decoder, payload []byte, placed bool) error {
	return a.DecodeMax(d, payload, placed, DefaultMaxData)
}

// DecodeMax is Decode with data of at most max bytes.
func (a *WriteArgs) DecodeMax(d *xdr.Decoder, payload []byte, placed bool, max int) error {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	count := d.Uint32()
	a.Stable = decodeStableHow(d)
	a.Data = decodeDDP(d, payload, placed, max, "WRITE data")
	if d.Err() == nil && uint64(count) != uint64(len(a.Data)) {
		d.SetErr(fmt.Errorf("%w: WRITE count %d, data %d bytes", ErrCountMismatch, count, len(a.Data)))
	}
	return d.Err()
}

// DecodeVec reads a whose data the transport placed in pieces (vec, in
// order, sunrpc.Request.ArgPayloadVec), of at most max bytes: the
// length word and count must both be the pieces' total. Data stays nil;
// the data is vec, not copied (the caller writes it with pwritev).
func (a *WriteArgs) DecodeVec(d *xdr.Decoder, vec [][]byte, max int) error {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	count := d.Uint32()
	a.Stable = decodeStableHow(d)
	n := d.Uint32()
	total := 0
	for _, p := range vec {
		total += len(p)
	}
	switch {
	case d.Err() != nil:
	case uint64(n) > uint64(max):
		d.SetErr(fmt.Errorf("%w: WRITE data of %d bytes, maximum %d", xdr.ErrTooLong, n, max))
	case uint64(n) != uint64(total):
		d.SetErr(fmt.Errorf("%w: placed WRITE data has %d bytes, its length word says %d", xdr.ErrShort, total, n))
	case count != n:
		d.SetErr(fmt.Errorf("%w: WRITE count %d, data %d bytes", ErrCountMismatch, count, n))
	}
	a.Data = nil
	return d.Err()
}

// CreateArgs is CREATE3args (RFC 1813 section 3.3.8), 20..392 bytes.
type CreateArgs struct {
	Where DirOpArgs
	How   CreateHow
}

// Encode writes a.
func (a *CreateArgs) Encode(e *xdr.Encoder) {
	a.Where.Encode(e)
	a.How.Encode(e)
}

// Decode reads a.
func (a *CreateArgs) Decode(d *xdr.Decoder) error {
	a.Where.Decode(d)
	a.How.Decode(d)
	return d.Err()
}

// MkdirArgs is MKDIR3args (RFC 1813 section 3.3.9), 32..388 bytes.
type MkdirArgs struct {
	Where DirOpArgs
	Attr  Sattr // attributes
}

// Encode writes a.
func (a *MkdirArgs) Encode(e *xdr.Encoder) {
	a.Where.Encode(e)
	a.Attr.Encode(e)
}

// Decode reads a.
func (a *MkdirArgs) Decode(d *xdr.Decoder) error {
	a.Where.Decode(d)
	a.Attr.Decode(d)
	return d.Err()
}

// SymlinkArgs is SYMLINK3args (RFC 1813 section 3.3.10): where (8..328
// bytes), then symlinkdata3: symlink_attributes (24..60 bytes) and
// symlink_data, an nfspath3 (4-byte length, bytes, padding), at most
// MaxPathLen bytes on decode.
//
// Path (symlink_data) is DDP-eligible (RFC 8267 section 4) and the last
// item. Encode writes everything up to and including its length word and
// returns Path, unappended and without padding: the transport sends it as
// a Read chunk at XDR position e.Len(), or on TCP right after the head
// followed by xdr.Pad(len(Path)) zero bytes. EncodeInline writes it all.
// Decode reads the length word; with placed true, Path is
// payload[:length] (payload must hold at least length bytes; the rest is
// ignored); with placed false, Path is read inline with its padding from d.
// Path aliases payload or d's input; nothing is copied.
type SymlinkArgs struct {
	Where DirOpArgs
	Attr  Sattr  // symlink_attributes
	Path  []byte // symlink_data, DDP-eligible
}

// Encode writes a up to the path's length word and returns a.Path (see SymlinkArgs).
func (a *SymlinkArgs) Encode(e *xdr.Encoder) (payload []byte) {
	a.Where.Encode(e)
	a.Attr.Encode(e)
	return encodeDDP(e, a.Path)
}

// EncodeInline writes all of a, path and padding included.
func (a *SymlinkArgs) EncodeInline(e *xdr.Encoder) { e.Fixed(a.Encode(e)) }

// Decode reads a (see SymlinkArgs).
func (a *SymlinkArgs) Decode(d *xdr.Decoder, payload []byte, placed bool) error {
	a.Where.Decode(d)
	a.Attr.Decode(d)
	a.Path = decodeDDP(d, payload, placed, MaxPathLen, "SYMLINK path")
	return d.Err()
}

// MknodArgs is MKNOD3args (RFC 1813 section 3.3.11): where, then the
// mknoddata3 union on Type: NF3CHR and NF3BLK carry Attr and Spec
// (devicedata3), NF3SOCK and NF3FIFO carry Attr (pipe_attributes), other
// types nothing. 12..400 bytes. Fields of other arms are ignored by Encode
// and zeroed by Decode.
type MknodArgs struct {
	Where DirOpArgs
	Type  FileType
	Attr  Sattr    // dev_attributes or pipe_attributes
	Spec  SpecData // NF3CHR, NF3BLK
}

// Encode writes a.
func (a *MknodArgs) Encode(e *xdr.Encoder) {
	a.Where.Encode(e)
	e.Uint32(uint32(a.Type))
	switch a.Type {
	case TypeChr, TypeBlk:
		a.Attr.Encode(e)
		a.Spec.Encode(e)
	case TypeSock, TypeFIFO:
		a.Attr.Encode(e)
	}
}

// Decode reads a.
func (a *MknodArgs) Decode(d *xdr.Decoder) error {
	a.Where.Decode(d)
	a.Type = FileType(d.Uint32())
	a.Attr, a.Spec = Sattr{}, SpecData{}
	switch a.Type {
	case TypeChr, TypeBlk:
		a.Attr.Decode(d)
		a.Spec.Decode(d)
	case TypeSock, TypeFIFO:
		a.Attr.Decode(d)
	}
	return d.Err()
}

// RemoveArgs is REMOVE3args (RFC 1813 section 3.3.12), 8..328 bytes.
type RemoveArgs struct {
	Object DirOpArgs
}

// Encode writes a.
func (a *RemoveArgs) Encode(e *xdr.Encoder) { a.Object.Encode(e) }

// Decode reads a.
func (a *RemoveArgs) Decode(d *xdr.Decoder) error { return a.Object.Decode(d) }

// RmdirArgs is RMDIR3args (RFC 1813 section 3.3.13), 8..328 bytes.
type RmdirArgs struct {
	Object DirOpArgs
}

// Encode writes a.
func (a *RmdirArgs) Encode(e *xdr.Encoder) { a.Object.Encode(e) }

// Decode reads a.
func (a *RmdirArgs) Decode(d *xdr.Decoder) error { return a.Object.Decode(d) }

// RenameArgs is RENAME3args (RFC 1813 section 3.3.14), 16..656 bytes.
type RenameArgs struct {
	From DirOpArgs
	To   DirOpArgs
}

// Encode writes a.
func (a *RenameArgs) Encode(e *xdr.Encoder) {
	a.From.Encode(e)
	a.To.Encode(e)
}

// Decode reads a.
func (a *RenameArgs) Decode(d *xdr.Decoder) error {
	a.From.Decode(d)
	a.To.Decode(d)
	return d.Err()
}

// LinkArgs is LINK3args (RFC 1813 section 3.3.15), 12..396 bytes.
type LinkArgs struct {
	File FH
	Link DirOpArgs
}

// Encode writes a.
func (a *LinkArgs) Encode(e *xdr.Encoder) {
	a.File.Encode(e)
	a.Link.Encode(e)
}

// Decode reads a.
func (a *LinkArgs) Decode(d *xdr.Decoder) error {
	a.File.Decode(d)
	a.Link.Decode(d)
	return d.Err()
}

// ReaddirArgs is READDIR3args (RFC 1813 section 3.3.16), 24..88 bytes.
type ReaddirArgs struct {
	Dir    FH
	Cookie uint64     // cookie3: 0 to start
	Verf   CookieVerf // cookieverf: zero to start
	Count  uint32     // count3: largest READDIR3resok, bytes
}

// Encode writes a.
func (a *ReaddirArgs) Encode(e *xdr.Encoder) {
	a.Dir.Encode(e)
	e.Uint64(a.Cookie)
	e.Fixed(a.Verf[:])
	e.Uint32(a.Count)
}

// Decode reads a.
func (a *ReaddirArgs) Decode(d *xdr.Decoder) error {
	a.Dir.Decode(d)
	a.Cookie = d.Uint64()
	copy(a.Verf[:], d.Fixed(CookieVerfSize))
	a.Count = d.Uint32()
	return d.Err()
}

// ReaddirplusArgs is READDIRPLUS3args (RFC 1813 section 3.3.17), 28..92 bytes.
type ReaddirplusArgs struct {
	Dir      FH
	Cookie   uint64     // cookie3: 0 to start
	Verf     CookieVerf // cookieverf: zero to start
	DirCount uint32     // dircount: bytes of directory information (fileid, name, cookie), a hint
	MaxCount uint32     // maxcount: largest READDIRPLUS3resok, bytes
}

// Encode writes a.
func (a *ReaddirplusArgs) Encode(e *xdr.Encoder) {
	a.Dir.Encode(e)
	e.Uint64(a.Cookie)
	e.Fixed(a.Verf[:])
	e.Uint32(a.DirCount)
	e.Uint32(a.MaxCount)
}

// Decode reads a.
func (a *ReaddirplusArgs) Decode(d *xdr.Decoder) error {
	a.Dir.Decode(d)
	a.Cookie = d.Uint64()
	copy(a.Verf[:], d.Fixed(CookieVerfSize))
	a.DirCount = d.Uint32()
	a.MaxCount = d.Uint32()
	return d.Err()
}

// FsstatArgs is FSSTAT3args (RFC 1813 section 3.3.18), 4..68 bytes.
type FsstatArgs struct {
	FSRoot FH
}

// Encode writes a.
func (a *FsstatArgs) Encode(e *xdr.Encoder) { a.FSRoot.Encode(e) }

// Decode reads a.
func (a *FsstatArgs) Decode(d *xdr.Decoder) error { return a.FSRoot.Decode(d) }

// FsinfoArgs is FSINFO3args (RFC 1813 section 3.3.19), 4..68 bytes.
type FsinfoArgs struct {
	FSRoot FH
}

// Encode writes a.
func (a *FsinfoArgs) Encode(e *xdr.Encoder) { a.FSRoot.Encode(e) }

// Decode reads a.
func (a *FsinfoArgs) Decode(d *xdr.Decoder) error { return a.FSRoot.Decode(d) }

// PathconfArgs is PATHCONF3args (RFC 1813 section 3.3.20), 4..68 bytes.
type PathconfArgs struct {
	Object FH
}

// Encode writes a.
func (a *PathconfArgs) Encode(e *xdr.Encoder) { a.Object.Encode(e) }

// Decode reads a.
func (a *PathconfArgs) Decode(d *xdr.Decoder) error { return a.Object.Decode(d) }

// CommitArgs is COMMIT3args (RFC 1813 section 3.3.21), 16..80 bytes.
type CommitArgs struct {
	File   FH
	Offset uint64 // offset3
	Count  uint32 // count3: 0 means to the end of file
}

// Encode writes a.
func (a *CommitArgs) Encode(e *xdr.Encoder) {
	a.File.Encode(e)
	e.Uint64(a.Offset)
	e.Uint32(a.Count)
}

// Decode reads a.
func (a *CommitArgs) Decode(d *xdr.Decoder) error {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
	return d.Err()
}
