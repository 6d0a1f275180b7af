// Package nfs3 is the XDR codec of NFS version 3 (RFC 1813, program 100003
// version 3), both directions: a client encodes arguments and decodes
// results, a server decodes arguments and encodes results. It carries no
// transport and no RPC header; pkg/xdr does the 4-byte units.
//
// # Naming
//
// RFC 1813 types become Go types without the "3" suffix: nfs_fh3 is FH,
// fattr3 is Fattr, post_op_attr is PostOpAttr, sattr3 is Sattr, and so on.
// The arguments and results of procedure FOO are FooArgs and FooRes
// (GETATTR3args is GetattrArgs, READDIRPLUS3res is ReaddirplusRes). A result
// type holds the status and the fields of both arms of its union flattened
// into one struct: the fields of the resfail arm are a subset of those of the
// resok arm in every NFSv3 procedure, so Encode writes the arm selected by
// Status and Decode fills the fields of the arm it read.
//
// Every type without a DDP-eligible item has
//
//	Encode(e *xdr.Encoder)
//	Decode(d *xdr.Decoder) error
//
// (the Message interface). Decode aliases the input where it can (opaque
// data), allocates strings for names, and returns d.Err().
//
// # DDP-eligible items (RFC 8267 section 4)
//
// Four items may travel outside the XDR stream: the data of WRITE
// (WriteArgs.Data), the pathname of SYMLINK (SymlinkArgs.Path), the data of
// READ (ReadRes.Data) and the pathname of READLINK (ReadlinkRes.Path). In
// NFSv3 each is the last item of its message. Their types implement
// DDPMessage instead of Message:
//
//	Encode(e *xdr.Encoder) (payload []byte)
//	EncodeInline(e *xdr.Encoder)
//	Decode(d *xdr.Decoder, payload []byte, placed bool) error
//
// Encode writes everything up to and including the item's XDR length word
// and returns the item's bytes without appending them and without its XDR
// padding. The transport then sends payload as a Read chunk (WRITE, SYMLINK;
// its XDR Position is e.Len() after Encode, counted from the start of the
// RPC message), or RDMA-Writes it into the requester's Write chunk (READ,
// READLINK), or, on TCP or when it chooses not to reduce the item, sends it
// right after the head followed by xdr.Pad(len(payload)) zero bytes. The
// returned slice aliases the struct's field; nothing is copied.
// EncodeInline writes the whole message into e (length, bytes, padding).
//
// Decode reads the length word from d. If placed is true the transport put
// the item's bytes outside the XDR stream: payload must hold at least that
// many bytes (bytes past the length, such as XDR padding in a Read chunk, are
// ignored) and the field is set to payload[:length], aliasing it. If placed
// is false the item is read inline from d, with its padding, and the field
// aliases d's input. Either way nothing is copied. The length is refused
// with xdr.ErrTooLong above the item's maximum (MaxPathLen for paths,
// DefaultMaxData for READ and WRITE data unless DecodeMax is used).
//
// # Errors
//
// Status (nfsstat3) implements error; the non-OK constants are named
// ErrPerm, ErrNoEnt, ... so that errors.Is(err, nfs3.ErrStale) works through
// any %w wrapping. Status.Errno maps to a user-space syscall.Errno, and Is
// makes a Status match that Errno and fs.ErrNotExist, fs.ErrExist,
// fs.ErrPermission, errors.ErrUnsupported as syscall.Errno does.
package nfs3

import "github.com/nfsrdma/nfsrdma-csi/pkg/xdr"

// Message is implemented by every argument and result type whose XDR holds
// no DDP-eligible item (all but WriteArgs, SymlinkArgs, ReadRes, ReadlinkRes).
type Message interface {
	Encode(e *xdr.Encoder)
	Decode(d *xdr.Decoder) error
}

// DDPMessage is implemented by the four types that end with a DDP-eligible
// item (RFC 8267 section 4): WriteArgs, SymlinkArgs, ReadRes, ReadlinkRes.
// See the package documentation for the contract.
type DDPMessage interface {
	Encode(e *xdr.Encoder) (payload []byte)
	EncodeInline(e *xdr.Encoder)
	Decode(d *xdr.Decoder, payload []byte, placed bool) error
}
