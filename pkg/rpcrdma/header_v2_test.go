package rpcrdma

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// Byte vectors written from the XDR of draft-ietf-nfsv4-rpcrdma-version-two
// section 8: rpcrdma_common (xid, vers, credit, htype) then the header
// type's struct; optional-data (the *list and *chunk pointers) is a 0/1
// discriminator (RFC 4506 section 4.19), a segment is HLOO.
var (
	segA = Segment{Handle: 0xa1, Length: 0x1000, Offset: 0x0000000100002000}
	segB = Segment{Handle: 0xb2, Length: 0x200, Offset: 0x3000}
	segC = Segment{Handle: 0xc3, Length: 0x8000, Offset: 0xffff0000}
)

type wire2Case struct {
	name string
	h    Header
	wire []byte
}

func wire2Cases() []wire2Case {
	h2 := func(xid, credits uint32, t HType, x Header2) Header {
		x.HType = t
		return Header{XID: xid, Vers: 2, Credits: credits, Proc: t.v1Proc(), Header2: x}
	}
	withChunks := func(h Header, reads []ReadSegment, writes [][]Segment, reply []Segment) Header {
		h.Reads, h.Writes, h.Reply, h.HasReply = reads, writes, reply, reply != nil
		return h
	}
	var props [20]byte
	ours := Properties{SendSize: 8192, RecvSize: 8192, MaxSegSize: 1 << 20, MaxSegs: 16, Reverse: ReverseNone}
	return []wire2Case{
		{"call-inline-bare", h2(0x01020304, 32, HTypeCallInline, Header2{}),
			words(0x01020304, 2, 32, 10, 0, 0, 0, 0)},
		{"call-inline-chunks", withChunks(h2(7, 8, HTypeCallInline, Header2{InvHandle: 0xb2}),
			[]ReadSegment{{Position: 100, Segment: segB}, {Position: 100, Segment: segA}}, [][]Segment{{segB}}, []Segment{segC}),
			words(cat(w(7, 2, 8, 10, 0xb2),
				w(1, 100), hloo(segB), w(1, 100), hloo(segA), w(0),
				w(1, 1), hloo(segB), w(0),
				w(1, 1), hloo(segC))...)},
		{"call-external", withChunks(h2(9, 8, HTypeCallExternal, Header2{InvHandle: 0}),
			[]ReadSegment{{Position: 0, Segment: segA}, {Position: 0, Segment: segB}, {Position: 8, Segment: segC}}, nil, []Segment{segC, segA}),
			words(cat(w(9, 2, 8, 8, 0),
				w(1, 0), hloo(segA), w(1, 0), hloo(segB), w(0), // rdma_call
				w(1, 8), hloo(segC), w(0), // rdma_reads
				w(0), // rdma_provisional_writes
				w(1, 2), hloo(segC), hloo(segA))...)},
		{"call-middle", h2(11, 8, HTypeCallMiddle, Header2{Remaining: 70000}),
			words(11, 2, 8, 9, 70000)},
		{"reply-inline", withChunks(h2(12, 30, HTypeReplyInline, Header2{}), nil, [][]Segment{{segA, segB}, {}}, nil),
			words(cat(w(12, 2, 30, 13), w(1, 2), hloo(segA), hloo(segB), w(1, 0), w(0))...)},
		{"reply-external", withChunks(h2(13, 30, HTypeReplyExternal, Header2{}), nil, nil, []Segment{segC}),
			words(cat(w(13, 2, 30, 11), w(0), w(1, 1), hloo(segC))...)},
		{"reply-middle", h2(14, 30, HTypeReplyMiddle, Header2{Remaining: 4}),
			words(14, 2, 30, 12, 4)},
		{"grant", h2(0, 64, HTypeGrant, Header2{}), words(0, 2, 64, 5)},
		{"connprop-final", h2(15, 1, HTypeConnPropFinal, Header2{Props: append(ours.AppendProps(nil, &props), Prop{Which: 99, Data: []byte("abc")})}),
			words(15, 2, 1, 7, 6, 1, 4, 8192, 2, 4, 8192, 3, 4, 1<<20, 4, 4, 16, 5, 4, 0, 99, 3, 0x61626300)},
		{"connprop-middle-empty", h2(16, 1, HTypeConnPropMiddle, Header2{Props: []Prop{}}), words(16, 2, 1, 6, 0)},
		{"err-vers", h2(17, 3, HTypeError, Header2{Err: Error2{Code: Err2Vers, VersLow: 1, VersHigh: 2}}), words(17, 2, 3, 4, 1, 1, 2)},
		{"err-bad-xdr", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2BadXDR}}), words(18, 2, 3, 4, 2)},
		{"err-bad-propval", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2BadPropVal}}), words(18, 2, 3, 4, 3)},
		{"err-inval-htype", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2InvalHType}}), words(18, 2, 3, 4, 4)},
		{"err-inval-cont", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2InvalCont}}), words(18, 2, 3, 4, 5)},
		{"err-read-chunks", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2ReadChunks, MaxChunks: 1}}), words(18, 2, 3, 4, 6, 1)},
		{"err-write-chunks", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2WriteChunks, MaxChunks: 16}}), words(18, 2, 3, 4, 7, 16)},
		{"err-segments", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2Segments, MaxSegments: 64}}), words(18, 2, 3, 4, 8, 64)},
		{"err-write-resource", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2WriteResource, ChunkIndex: 1, LengthNeeded: 9000}}), words(18, 2, 3, 4, 9, 1, 9000)},
		{"err-reply-resource", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2ReplyResource, LengthNeeded: 70000}}), words(18, 2, 3, 4, 10, 70000)},
		{"err-vers-mismatch", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2VersMismatch}}), words(18, 2, 3, 4, 11)},
		{"err-system", h2(18, 3, HTypeError, Header2{Err: Error2{Code: Err2System}}), words(18, 2, 3, 4, 100)},
	}
}

func equalHeaders2(a, b *Header) bool {
	if !equalHeaders(a, b) || a.HType != b.HType || a.InvHandle != b.InvHandle || a.Remaining != b.Remaining || a.Err != b.Err || len(a.Props) != len(b.Props) {
		return false
	}
	for i := range a.Props {
		if a.Props[i].Which != b.Props[i].Which || !bytes.Equal(a.Props[i].Data, b.Props[i].Data) {
			return false
		}
	}
	return true
}

// TestHeader2Wire: each header type encodes to the bytes the draft's XDR
// gives, decodes from them to the same header, and Len is their length.
// Every RDMA2_ERR_* code is among them.
func TestHeader2Wire(t *testing.T) {
	codes := map[Errcode2]bool{}
	for _, c := range wire2Cases() {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.h.Encode(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, c.wire) {
				t.Fatalf("encoded\n% x\nwant\n% x", b, c.wire)
			}
			if c.h.Len() != len(c.wire) {
				t.Fatalf("Len %d, wire %d", c.h.Len(), len(c.wire))
			}
			var d Header
			msg := append(append([]byte(nil), c.wire...), 0xde, 0xad, 0xbe, 0xef) // a payload's first word
			n, err := d.Decode2(msg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(c.wire) {
				t.Fatalf("decoded %d bytes, want %d", n, len(c.wire))
			}
			if !equalHeaders2(&d, &c.h) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", d, c.h)
			}
			if c.h.HType == HTypeError {
				codes[d.Err.Code] = true
			}
		})
	}
	for _, c := range Errcodes2 {
		if !codes[c] {
			t.Errorf("%v has no wire vector", c)
		}
	}
}

// TestDecode2Errors: malformed version 2 headers fail with the error that
// names the RDMA2_ERROR code the draft requires (section 7).
func TestDecode2Errors(t *testing.T) {
	lim := &Limits{MaxReadSegments: 4, MaxWriteChunks: 2, MaxChunkSegments: 3, MaxSegments: 6}
	for _, c := range []struct {
		name string
		wire []byte
		kind error
		code Errcode2
		max  uint32
	}{
		{"short-prefix", words(1, 2, 3), ErrShort, Err2BadXDR, 0},
		{"version-3", words(1, 3, 1, 10, 0, 0, 0, 0), ErrVers, Err2Vers, 0},
		{"version-1", words(1, 1, 1, 0, 0, 0, 0), ErrVers, Err2Vers, 0},
		{"htype-0", words(1, 2, 1, 0, 0, 0, 0), ErrHType, Err2InvalHType, 0},
		{"htype-3", words(1, 2, 1, 3), ErrHType, Err2InvalHType, 0},
		{"htype-14", words(1, 2, 1, 14, 0, 0, 0, 0), ErrHType, Err2InvalHType, 0},
		{"truncated-inline", words(1, 2, 1, 10, 0, 0), ErrShort, Err2BadXDR, 0},
		{"bad-discriminator", words(1, 2, 1, 10, 0, 2, 0, 0), ErrChunk, Err2BadXDR, 0},
		{"external-no-call-chunk", words(1, 2, 1, 8, 0, 0, 0, 0, 0), ErrChunk, Err2BadXDR, 0},
		{"call-chunk-nonzero-position", words(cat(w(1, 2, 1, 8, 0, 1, 4), hloo(segA), w(0, 0, 0, 0))...), ErrChunk, Err2BadXDR, 0},
		{"inline-position-zero", words(cat(w(1, 2, 1, 10, 0, 1, 0), hloo(segA), w(0, 0, 0))...), ErrChunk, Err2BadXDR, 0},
		{"position-not-aligned", words(cat(w(1, 2, 1, 10, 0, 1, 6), hloo(segA), w(0, 0, 0))...), ErrChunk, Err2BadXDR, 0},
		{"positions-decrease", words(cat(w(1, 2, 1, 10, 0, 1, 8), hloo(segA), w(1, 4), hloo(segA), w(0, 0, 0))...), ErrChunk, Err2BadXDR, 0},
		{"segment-wraps", words(cat(w(1, 2, 1, 10, 0, 1, 8), hloo(Segment{Handle: 1, Length: 2, Offset: ^uint64(0)}), w(0, 0, 0))...), ErrChunk, Err2BadXDR, 0},
		{"reply-external-no-reply-chunk", words(1, 2, 1, 11, 0, 0), ErrChunk, Err2BadXDR, 0},
		{"too-many-write-chunks", words(cat(w(1, 2, 1, 13), w(1, 0), w(1, 0), w(1, 0), w(0))...), ErrWriteChunks, Err2WriteChunks, 2},
		{"chunk-too-many-segments", words(cat(w(1, 2, 1, 13, 1, 4), hloo(segA), hloo(segA), hloo(segA), hloo(segA), w(0))...), ErrSegments, Err2Segments, 3},
		{"absurd-segment-count", words(1, 2, 1, 13, 1, 0xffffffff, 0), ErrSegments, Err2Segments, 3},
		{"read-list-too-long", words(cat(w(1, 2, 1, 10, 0), w(1, 4), hloo(segA), w(1, 8), hloo(segA), w(1, 12), hloo(segA), w(1, 16), hloo(segA), w(1, 20), hloo(segA), w(0, 0, 0))...), ErrSegments, Err2Segments, 3},
		{"error-unknown-code", words(1, 2, 1, 4, 12), ErrChunk, Err2BadXDR, 0},
		{"error-vers-truncated", words(1, 2, 1, 4, 1, 1), ErrShort, Err2BadXDR, 0},
		{"middle-truncated", words(1, 2, 1, 9), ErrShort, Err2BadXDR, 0},
		{"props-absurd-count", words(1, 2, 1, 7, 0xffffffff), ErrChunk, Err2BadXDR, 0},
		{"props-count-past-end", words(1, 2, 1, 7, 3, 1, 0), ErrShort, Err2BadXDR, 0},
		{"prop-data-past-end", words(1, 2, 1, 7, 1, 1, 0x7fffffff, 0), ErrShort, Err2BadXDR, 0},
		{"prop-nonzero-pad", words(1, 2, 1, 7, 1, 99, 3, 0x61626301), ErrChunk, Err2BadXDR, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h Header
			n, err := h.Decode2(c.wire, lim)
			if err == nil || n != 0 {
				t.Fatalf("decoded (%d bytes): %+v", n, h)
			}
			if !errors.Is(err, c.kind) {
				t.Fatalf("error %v, want %v", err, c.kind)
			}
			if code, max := Errcode2Of(err); code != c.code || max != c.max {
				t.Fatalf("%v answered with %v max %d, want %v max %d", err, code, max, c.code, c.max)
			}
		})
	}
	// Errors that do not come from the decoder.
	for _, c := range []struct {
		err  error
		code Errcode2
	}{
		{fmt.Errorf("x: %w", ErrCont), Err2InvalCont},
		{ErrVersMismatch, Err2VersMismatch},
		{&HeaderError{Kind: ErrReadChunks, Max: 1}, Err2ReadChunks},
		{&HeaderError{Kind: ErrPropVal}, Err2BadPropVal},
		{errors.New("out of memory"), Err2System},
	} {
		if code, _ := Errcode2Of(c.err); code != c.code {
			t.Errorf("%v: %v, want %v", c.err, code, c.code)
		}
	}
}

// TestEncode2Refuses: Encode refuses version 2 headers a sender must not
// send.
func TestEncode2Refuses(t *testing.T) {
	for _, h := range []Header{
		{Vers: 2, Header2: Header2{HType: 3}},
		{Vers: 2, Header2: Header2{HType: HTypeError, Err: Error2{Code: 12}}},
		{Vers: 2, Header2: Header2{HType: HTypeCallExternal}},
		{Vers: 2, Reads: []ReadSegment{{Position: 0, Segment: segA}}, Header2: Header2{HType: HTypeCallInline}},
		{Vers: 2, Header2: Header2{HType: HTypeReplyExternal}},
		{Vers: 2, Reply: []Segment{segA}, Header2: Header2{HType: HTypeReplyInline}},
		{Vers: 2, Reads: []ReadSegment{{Position: 4, Segment: segA}}, Header2: Header2{HType: HTypeReplyInline}},
		{Vers: 2, Reads: []ReadSegment{{Position: 8, Segment: segA}, {Position: 4, Segment: segA}}, Header2: Header2{HType: HTypeCallInline}},
	} {
		if b, err := h.Encode(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: encoded % x, %v", h, b, err)
		}
	}
}

// TestProperties: the base properties parse from their propval encodings;
// empty values keep the default; unknown properties are skipped; values
// that are not their XDR type are RDMA2_ERR_BAD_PROPVAL (section 5.1).
func TestProperties(t *testing.T) {
	u := func(v uint32) []byte { return words(v) }
	p, err := ParseProperties([]Prop{{PropSendSize, u(65536)}, {PropRecvSize, u(32768)}, {PropMaxSegSize, nil},
		{PropMaxSegs, u(8)}, {1000, []byte{1, 2, 3}}, {PropReverse, u(ReverseCont)}, {PropHostAuth, words(2, 0x68690000)}})
	if err != nil {
		t.Fatal(err)
	}
	want := Properties{SendSize: 65536, RecvSize: 32768, MaxSegSize: DefaultMaxSegSize2, MaxSegs: 8, Reverse: ReverseCont, HostAuth: []byte("hi")}
	if p.SendSize != want.SendSize || p.RecvSize != want.RecvSize || p.MaxSegSize != want.MaxSegSize || p.MaxSegs != want.MaxSegs ||
		p.Reverse != want.Reverse || string(p.HostAuth) != "hi" {
		t.Fatalf("%+v, want %+v", p, want)
	}
	if p, err := ParseProperties(nil); err != nil || p.SendSize != 4096 || p.RecvSize != 4096 || p.MaxSegSize != 1<<20 || p.MaxSegs != 16 || p.Reverse != 0 || p.HostAuth != nil {
		t.Fatalf("defaults %+v %v", p, err)
	}
	for _, bad := range [][]Prop{
		{{PropSendSize, []byte{1, 2}}},
		{{PropRecvSize, words(1, 2)}},
		{{PropReverse, u(4)}},
		{{PropHostAuth, words(8, 1)}},
		{{PropHostAuth, words(0, 0)}},
	} {
		if _, err := ParseProperties(bad); !errors.Is(err, ErrPropVal) {
			t.Errorf("%v: %v", bad, err)
		} else if code, _ := Errcode2Of(err); code != Err2BadPropVal {
			t.Errorf("%v: %v", bad, code)
		}
	}
}

// TestAppendError2: the RDMA2_ERROR a responder sends copies rdma_xid and
// rdma_vers from the message it answers (section 7).
func TestAppendError2(t *testing.T) {
	b := appendError2(nil, 0x77, 9, 5, Error2{Code: Err2Vers, VersLow: 1, VersHigh: 2})
	if want := words(0x77, 9, 5, 4, 1, 1, 2); !bytes.Equal(b, want) {
		t.Fatalf("% x, want % x", b, want)
	}
	buf := make([]byte, 0, Error2MaxLen)
	if n := testing.AllocsPerRun(10, func() { _ = appendError2(buf, 1, 2, 3, Error2{Code: Err2WriteResource}) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestDecode2NoAllocs: decoding into a reused Header allocates nothing.
func TestDecode2NoAllocs(t *testing.T) {
	cs := wire2Cases()
	var h Header
	for _, c := range cs {
		if _, err := h.Decode2(c.wire, nil); err != nil {
			t.Fatal(err)
		}
	}
	n := testing.AllocsPerRun(20, func() {
		for _, c := range cs {
			_, _ = h.Decode2(c.wire, nil)
		}
	})
	if n != 0 && !raceEnabled {
		t.Fatalf("%v allocations", n)
	}
}

// BenchmarkDecode2 decodes an RDMA2_CALL_INLINE with a Read chunk of two
// segments, a Write chunk and a Reply chunk into a reused Header.
func BenchmarkDecode2(b *testing.B) {
	var msg []byte
	for _, c := range wire2Cases() {
		if c.name == "call-inline-chunks" {
			msg = c.wire
		}
	}
	var h Header
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := h.Decode2(msg, nil); err != nil {
			b.Fatal(err)
		}
	}
}
