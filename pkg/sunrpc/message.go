package sunrpc

import (
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Message is an encoded RPC message in three parts: Head, then an optional
// DDP-eligible data item Payload (its XDR length word ends Head; its XDR pad
// is implied, never stored), then Tail. A transport that cannot place
// Payload directly (TCP) sends Head, Payload, pad, Tail in sequence
// (writev). RFC 8166 section 6 and RFC 8267 section 2 say which items are
// DDP-eligible (e.g. NFSv3 WRITE and READ data).
type Message struct {
	Head, Payload, Tail []byte
	HasPayload          bool
}

// Len returns the length in bytes of the message as XDR: Head, Payload and
// its pad, Tail.
func (m *Message) Len() int {
	n := len(m.Head) + len(m.Tail)
	if m.HasPayload {
		n += xdr.RoundUp(len(m.Payload))
	}
	return n
}

// AppendTo appends the message as contiguous XDR (Head, Payload, pad, Tail)
// to b and returns the extended slice. It copies; transports use it only
// where they cannot gather.
func (m *Message) AppendTo(b []byte) []byte {
	b = append(b, m.Head...)
	if m.HasPayload {
		b = append(b, m.Payload...)
		b = append(b, zeroPad[:xdr.Pad(len(m.Payload))]...)
	}
	return append(b, m.Tail...)
}

var zeroPad [4]byte

// Builder encodes a Message: an xdr.Encoder (embedded: use its Uint32,
// Opaque, ... methods) plus at most one DDP-eligible item marked with
// Payload. Encoding continues after Payload into the Tail. A Builder is
// reusable after Reset; it is not safe for concurrent use.
type Builder struct {
	xdr.Encoder
	payload   []byte
	headEnd   int
	has       bool
	afterSend func()
}

// NewBuilder returns a Builder appending to buf[:0]'s backing array.
func NewBuilder(buf []byte) *Builder {
	b := &Builder{}
	b.Reset(buf)
	return b
}

// Reset makes b encode into buf[:0], with no payload and no AfterSend hook.
func (b *Builder) Reset(buf []byte) {
	b.Encoder.Reset(buf)
	b.payload, b.headEnd, b.has, b.afterSend = nil, 0, false, nil
}

// restart empties b keeping its buffer and AfterSend hook.
func (b *Builder) restart() {
	b.Encoder.Reset(b.Encoder.Bytes())
	b.payload, b.headEnd, b.has = nil, 0, false
}

// Payload appends p as a DDP-eligible variable-length opaque item (RFC 4506
// section 4.10, RFC 8166 section 6): its length word now, its bytes by
// reference (p is not copied and must stay unchanged until the message is
// sent, see AfterSend). A message carries at most one such item; a second
// call encodes p inline like Opaque. len(p) must fit in 32 bits.
func (b *Builder) Payload(p []byte) {
	if b.has {
		b.Opaque(p)
		return
	}
	b.Uint32(uint32(len(p)))
	b.payload, b.headEnd, b.has = p, b.Len(), true
}

// MarkPayload marks p as the DDP-eligible item whose XDR length word the
// caller has just encoded (as the nfs3 DDP encoders do: they write the
// length word and return the item). Like Payload, p is kept by reference
// and a second item is encoded inline.
func (b *Builder) MarkPayload(p []byte) {
	if b.has {
		b.Fixed(p)
		return
	}
	b.payload, b.headEnd, b.has = p, b.Len(), true
}

// HasPayload reports whether a DDP-eligible item was marked.
func (b *Builder) HasPayload() bool { return b.has }

// Message returns the encoded message. Its slices alias b's buffer and the
// payload; they are valid until b is changed.
func (b *Builder) Message() Message {
	buf := b.Encoder.Bytes()
	if !b.has {
		return Message{Head: buf}
	}
	return Message{Head: buf[:b.headEnd:b.headEnd], Payload: b.payload, Tail: buf[b.headEnd:], HasPayload: true}
}

// AfterSend sets f to run once the transport no longer needs the message
// (sent, or dropped): the place to recycle a payload buffer. It replaces any
// earlier hook.
func (b *Builder) AfterSend(f func()) { b.afterSend = f }

// RunAfterSend runs and clears the AfterSend hook, if any. Transports call
// it after sending or dropping the message.
func (b *Builder) RunAfterSend() {
	if f := b.afterSend; f != nil {
		b.afterSend = nil
		f()
	}
}
