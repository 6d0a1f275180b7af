package rpcrdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// words builds wire bytes from 32-bit words.
func words(ws ...uint32) []byte {
	b := make([]byte, 0, 4*len(ws))
	for _, w := range ws {
		b = binary.BigEndian.AppendUint32(b, w)
	}
	return b
}

// hloo is a plain segment as wire words (RFC 8166 section 4.7).
func hloo(s Segment) []uint32 {
	return []uint32{s.Handle, s.Length, uint32(s.Offset >> 32), uint32(s.Offset)}
}

func cat(parts ...[]uint32) []uint32 {
	var r []uint32
	for _, p := range parts {
		r = append(r, p...)
	}
	return r
}

func w(ws ...uint32) []uint32 { return ws }

// equalHeaders compares headers, treating nil and empty slices alike.
func equalHeaders(a, b *Header) bool {
	if a.XID != b.XID || a.Vers != b.Vers || a.Credits != b.Credits || a.Proc != b.Proc ||
		a.hasReply() != b.hasReply() || a.Errcode != b.Errcode || a.VersLow != b.VersLow || a.VersHigh != b.VersHigh ||
		len(a.Reads) != len(b.Reads) || len(a.Writes) != len(b.Writes) || len(a.Reply) != len(b.Reply) {
		return false
	}
	for i := range a.Reads {
		if a.Reads[i] != b.Reads[i] {
			return false
		}
	}
	for i := range a.Writes {
		if len(a.Writes[i]) != len(b.Writes[i]) {
			return false
		}
		for j := range a.Writes[i] {
			if a.Writes[i][j] != b.Writes[i][j] {
				return false
			}
		}
	}
	for i := range a.Reply {
		if a.Reply[i] != b.Reply[i] {
			return false
		}
	}
	return true
}

var (
	s1 = Segment{Handle: 0x11, Length: 4096, Offset: 0x0000_7f00_0000_1000}
	s2 = Segment{Handle: 0x22, Length: 4095, Offset: 0x2000}
	s3 = Segment{Handle: 0x33, Length: 0, Offset: 0x3000}
	s4 = Segment{Handle: 0x44, Length: 1 << 20, Offset: 0xffff_ffff_0000_0000}
	s5 = Segment{Handle: 0x55, Length: 12, Offset: 0}
)

// wireCases are headers with their hand-written wire bytes (RFC 8166
// sections 4.1.2 and 4.7).
var wireCases = []struct {
	name string
	h    Header
	wire []byte
}{
	{
		name: "RDMA_MSG no chunks",
		h:    Header{XID: 0xdeadbeef, Vers: 1, Credits: 32, Proc: ProcMsg},
		wire: words(0xdeadbeef, 1, 32, 0, 0, 0, 0),
	},
	{
		name: "RDMA_MSG one Read chunk of two segments (NFS WRITE)",
		h: Header{XID: 7, Vers: 1, Credits: 128, Proc: ProcMsg,
			Reads: []ReadSegment{{Position: 132, Segment: s1}, {Position: 132, Segment: s2}}},
		wire: words(cat(w(7, 1, 128, 0),
			w(1, 132), hloo(s1), w(1, 132), hloo(s2), w(0),
			w(0), w(0))...),
	},
	{
		name: "RDMA_MSG Write list 3+2 segments (section 4.7 example)",
		h: Header{XID: 8, Vers: 1, Credits: 1, Proc: ProcMsg,
			Writes: [][]Segment{{s1, s2, s3}, {s4, s5}}},
		wire: words(cat(w(8, 1, 1, 0), w(0),
			w(1, 3), hloo(s1), hloo(s2), hloo(s3), w(1, 2), hloo(s4), hloo(s5), w(0),
			w(0))...),
	},
	{
		name: "RDMA_MSG Reply chunk of two segments",
		h:    Header{XID: 9, Vers: 1, Credits: 2, Proc: ProcMsg, HasReply: true, Reply: []Segment{s1, s5}},
		wire: words(cat(w(9, 1, 2, 0), w(0), w(0), w(1, 2), hloo(s1), hloo(s5))...),
	},
	{
		name: "RDMA_NOMSG Position Zero Read chunk and Reply chunk (Long Call)",
		h: Header{XID: 10, Vers: 1, Credits: 3, Proc: ProcNoMsg,
			Reads: []ReadSegment{{Position: 0, Segment: s1}}, HasReply: true, Reply: []Segment{s4}},
		wire: words(cat(w(10, 1, 3, 1), w(1, 0), hloo(s1), w(0), w(0), w(1, 1), hloo(s4))...),
	},
	{
		name: "RDMA_ERROR ERR_VERS",
		h:    Header{XID: 11, Vers: 1, Credits: 5, Proc: ProcError, Errcode: ErrcodeVers, VersLow: 1, VersHigh: 1},
		wire: words(11, 1, 5, 4, 1, 1, 1),
	},
	{
		name: "RDMA_ERROR ERR_CHUNK",
		h:    Header{XID: 12, Vers: 1, Credits: 5, Proc: ProcError, Errcode: ErrcodeChunk},
		wire: words(12, 1, 5, 4, 2),
	},
}

func TestWireBytes(t *testing.T) {
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.h.Encode(nil)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if !bytes.Equal(got, c.wire) {
				t.Errorf("Encode:\n got %x\nwant %x", got, c.wire)
			}
			if c.h.Len() != len(c.wire) {
				t.Errorf("Len = %d, want %d", c.h.Len(), len(c.wire))
			}
			var h Header
			payload := []byte("rpc message follows")
			n, err := h.Decode(append(bytes.Clone(c.wire), payload...), nil)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if n != len(c.wire) {
				t.Errorf("Decode n = %d, want %d", n, len(c.wire))
			}
			if !equalHeaders(&h, &c.h) {
				t.Errorf("Decode:\n got %+v\nwant %+v", h, c.h)
			}
		})
	}
}

func TestDecodeDone(t *testing.T) {
	var h Header
	n, err := h.Decode(words(5, 1, 9, 3), nil)
	if err != nil || n != FixedLen || h.Proc != ProcDone || h.XID != 5 || h.Credits != 9 {
		t.Fatalf("Decode RDMA_DONE = %d, %v, %+v", n, err, h)
	}
}

// roundTrips covers every proc Encode sends and every list shape.
var roundTrips = []Header{
	{Proc: ProcMsg},
	{XID: 1, Credits: 1, Proc: ProcMsg, Reads: []ReadSegment{{Position: 4, Segment: s1}}},
	{XID: 2, Proc: ProcMsg, Reads: []ReadSegment{{8, s1}, {8, s2}, {100, s3}, {100, s4}, {2000, s5}}},
	{XID: 3, Proc: ProcNoMsg, Reads: []ReadSegment{{0, s1}, {0, s2}, {64, s3}}},
	{XID: 4, Proc: ProcMsg, Writes: [][]Segment{{}}},                           // empty Write chunk
	{XID: 5, Proc: ProcMsg, Writes: [][]Segment{{s3, {Handle: 9}}}},            // unused Write chunk
	{XID: 6, Proc: ProcMsg, Writes: [][]Segment{{s1}, {}, {s2, s3, s4}, {s5}}}, // several
	{XID: 7, Proc: ProcMsg, HasReply: true},                                    // Reply chunk of 0 segments
	{XID: 8, Proc: ProcMsg, Reply: []Segment{s1, s2, s3}},                      // HasReply implied
	{XID: 9, Proc: ProcNoMsg, HasReply: true, Reply: []Segment{s4}},
	{XID: 10, Proc: ProcMsg, Reads: []ReadSegment{{12, s5}}, Writes: [][]Segment{{s1, s2}}, HasReply: true, Reply: []Segment{s3}},
	{XID: 11, Proc: ProcNoMsg, Reads: []ReadSegment{{0, s1}}, Writes: [][]Segment{{s2}}, HasReply: true, Reply: []Segment{s3}},
	{XID: 12, Vers: 1, Proc: ProcError, Errcode: ErrcodeVers, VersLow: 1, VersHigh: 1},
	{XID: 13, Proc: ProcError, Errcode: ErrcodeChunk},
	{XID: 0xffffffff, Credits: 0xffffffff, Proc: ProcMsg, Reads: []ReadSegment{{0xfffffffc, Segment{0xffffffff, 0xffffffff, 0}}}},
}

func TestRoundTrip(t *testing.T) {
	var h Header // reused across cases on purpose
	for i, want := range roundTrips {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			b, err := want.Encode([]byte("prefix"))
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if string(b[:6]) != "prefix" {
				t.Fatal("Encode did not append")
			}
			b = b[6:]
			if len(b) != want.Len() {
				t.Errorf("encoded %d bytes, Len %d", len(b), want.Len())
			}
			n, err := h.Decode(b, nil)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if n != len(b) {
				t.Errorf("n = %d, want %d", n, len(b))
			}
			w := want
			if w.Vers == 0 {
				w.Vers = Version
			}
			if !equalHeaders(&h, &w) {
				t.Errorf("round trip:\n got %+v\nwant %+v", h, w)
			}
			b2, err := h.Encode(nil)
			if err != nil || !bytes.Equal(b, b2) {
				t.Errorf("re-encode differs: %v\n%x\n%x", err, b, b2)
			}
		})
	}
}

func TestDecodeReuseNoStaleData(t *testing.T) {
	var h Header
	big, _ := roundTrips[10].Encode(nil)
	if _, err := h.Decode(big, nil); err != nil {
		t.Fatal(err)
	}
	small, _ := (&Header{XID: 99, Proc: ProcMsg}).Encode(nil)
	if _, err := h.Decode(small, nil); err != nil {
		t.Fatal(err)
	}
	if !equalHeaders(&h, &Header{XID: 99, Vers: 1, Proc: ProcMsg}) {
		t.Fatalf("stale data after reuse: %+v", h)
	}
}

func TestDecodeEncodeNoAlloc(t *testing.T) {
	msg, _ := roundTrips[10].Encode(nil)
	msg = append(msg, make([]byte, 200)...)
	var h Header
	if _, err := h.Decode(msg, nil); err != nil { // warm the slices
		t.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	lim := &Limits{}
	if a := testing.AllocsPerRun(100, func() { _, _ = h.Decode(msg, lim) }); a != 0 {
		t.Errorf("Decode: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = h.Encode(buf[:0]) }); a != 0 {
		t.Errorf("Encode: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() { _ = appendErrorReply(buf[:0], msg, ErrVers, 1) }); a != 0 {
		t.Errorf("appendErrorReply: %v allocs", a)
	}
}

func TestDecodeErrors(t *testing.T) {
	seg := hloo(s1)
	long := make([]uint32, 0, 4+20*6)
	long = append(long, 1, 1, 1, 0)
	for i := 0; i < 20; i++ {
		long = append(long, 1, 8)
		long = append(long, seg...)
	}
	long = append(long, 0, 0, 0)
	ddd := words(cat(w(1, 1, 1, 0, 1, 4), hloo(Segment{1, 1 << 30, 0}), w(0, 0, 0))...)

	tests := []struct {
		name   string
		msg    []byte
		lim    *Limits
		want   []error // all must match
		answer bool    // shouldAnswer
	}{
		{"empty", nil, nil, []error{ErrShort, ErrChunk}, false},
		{"3 bytes", []byte{1, 2, 3}, nil, []error{ErrShort}, false},
		{"15 bytes", words(1, 1, 1)[:12], nil, []error{ErrShort}, false},
		{"version 2", words(1, 2, 1, 0, 0, 0, 0), nil, []error{ErrVers}, true},
		{"version 0", words(1, 0, 1, 0, 0, 0, 0), nil, []error{ErrVers}, true},
		{"version 2 short", words(1, 2, 1, 0), nil, []error{ErrVers}, false},
		{"RDMA_MSGP", words(1, 1, 1, 2, 0, 0, 0, 0, 0), nil, []error{ErrChunk}, true},
		{"rdma_proc 5", words(1, 1, 1, 5, 0, 0, 0), nil, []error{ErrChunk}, true},
		{"discriminator 2", words(1, 1, 1, 0, 2, 0, 0), nil, []error{ErrChunk}, true},
		{"discriminator 0xffffffff in write list", words(1, 1, 1, 0, 0, 0xffffffff, 0), nil, []error{ErrChunk}, true},
		{"27 bytes", words(1, 1, 1, 0, 0, 0, 0)[:27], nil, []error{ErrShort, ErrChunk}, false},
		{"24 bytes, reply discriminator missing", words(1, 1, 1, 0, 0, 0), nil, []error{ErrShort, ErrChunk}, false},
		{"truncated read segment", words(1, 1, 1, 0, 1, 8, 1, 2), nil, []error{ErrShort, ErrChunk}, true},
		{"read position not a multiple of 4", words(cat(w(1, 1, 1, 0, 1, 6), seg, w(0, 0, 0))...), nil, []error{ErrChunk}, true},
		{"read positions backwards", words(cat(w(1, 1, 1, 0, 1, 16), seg, w(1, 8), seg, w(0, 0, 0))...), nil, []error{ErrChunk}, true},
		{"read chunk split", words(cat(w(1, 1, 1, 0, 1, 8), seg, w(1, 16), seg, w(1, 8), seg, w(0, 0, 0))...), nil, []error{ErrChunk}, true},
		{"read list over limit", words(long...), &Limits{MaxReadSegments: 19}, []error{ErrChunk}, true},
		{"read chunk over per-chunk limit", words(long...), &Limits{MaxChunkSegments: 10}, []error{ErrChunk}, true},
		{"read list within limits", words(long...), nil, nil, false},
		{"write chunk count 2^32-1", words(1, 1, 1, 0, 0, 1, 0xffffffff, 0, 0), nil, []error{ErrChunk}, true},
		{"write chunk count 65", words(1, 1, 1, 0, 0, 1, 65, 0, 0), nil, []error{ErrChunk}, true},
		{"write chunk count beyond the bytes", words(cat(w(1, 1, 1, 0, 0, 1, 10), seg, seg)...), nil, []error{ErrShort, ErrChunk}, true},
		{"write list over limit", words(1, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0), &Limits{MaxWriteChunks: 2}, []error{ErrChunk}, true},
		{"reply chunk count 1000", words(1, 1, 1, 0, 0, 0, 1, 1000), nil, []error{ErrChunk}, true},
		{"header segments over limit", words(cat(w(1, 1, 1, 0, 1, 0), seg, w(0, 1, 2), seg, seg, w(0, 1, 1), seg)...), &Limits{MaxSegments: 3}, []error{ErrChunk}, true},
		{"header segments at limit", words(cat(w(1, 1, 1, 0, 1, 0), seg, w(0, 1, 2), seg, seg, w(0, 1, 1), seg)...), &Limits{MaxSegments: 4}, nil, false},
		{"offset+length wraps", words(cat(w(1, 1, 1, 0, 0, 1, 1), hloo(Segment{1, 2, 1<<64 - 1}), w(0, 0))...), nil, []error{ErrChunk}, true},
		{"offset+length ends at 2^64", words(cat(w(1, 1, 1, 0, 0, 1, 1), hloo(Segment{1, 1, 1<<64 - 1}), w(0, 0))...), nil, nil, false},
		{"empty segment at 2^64-1", words(cat(w(1, 1, 1, 0, 0, 1, 1), hloo(Segment{1, 0, 1<<64 - 1}), w(0, 0))...), nil, nil, false},
		{"RDMA_NOMSG without chunks", words(1, 1, 1, 1, 0, 0, 0), nil, []error{ErrChunk}, true},
		{"RDMA_NOMSG with only a Write list", words(cat(w(1, 1, 1, 1, 0, 1, 1), seg, w(0, 0))...), nil, []error{ErrChunk}, true},
		{"RDMA_NOMSG with a non-zero Read chunk only", words(cat(w(1, 1, 1, 1, 1, 4), seg, w(0, 0, 0))...), nil, []error{ErrChunk}, true},
		{"RDMA_ERROR unknown rdma_err", words(1, 1, 1, 4, 3, 0, 0), nil, []error{ErrChunk}, false},
		{"RDMA_ERROR without rdma_err", words(1, 1, 1, 4), nil, []error{ErrShort}, false},
		{"ERR_VERS truncated", words(1, 1, 1, 4, 1, 1), nil, []error{ErrShort}, false},
		{"RDMA_DONE", words(1, 1, 1, 3, 0, 0, 0), nil, nil, false},
		{"read chunk of 1 GiB", ddd, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Header
			n, err := h.Decode(tc.msg, tc.lim)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("no error, want %v", tc.want)
				}
				if n != 0 {
					t.Errorf("n = %d on error", n)
				}
				for _, e := range tc.want {
					if !errors.Is(err, e) {
						t.Errorf("error %q does not match %v", err, e)
					}
				}
				var he *HeaderError
				if !errors.As(err, &he) {
					t.Errorf("error %T is not a *HeaderError", err)
				}
				if len(tc.msg) >= 4 && h.XID != binary.BigEndian.Uint32(tc.msg) {
					t.Errorf("XID %#x not kept on error", h.XID)
				}
			}
			if got := shouldAnswer(tc.msg, err); got != tc.answer {
				t.Errorf("shouldAnswer = %v, want %v (err %v)", got, tc.answer, err)
			}
		})
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, h := range []Header{
		{Proc: ProcMsgP},
		{Proc: ProcDone},
		{Proc: 9},
		{Proc: ProcError, Errcode: 7},
		{Proc: ProcMsg, Reads: []ReadSegment{{Position: 2, Segment: s1}}},
		{Proc: ProcMsg, Reads: []ReadSegment{{8, s1}, {4, s2}}},
		{Proc: ProcMsg, Writes: [][]Segment{{{Handle: 1, Length: 2, Offset: 1<<64 - 1}}}},
		{Proc: ProcNoMsg},
		{Proc: ProcNoMsg, Reads: []ReadSegment{{4, s1}}},
	} {
		b, err := h.Encode([]byte{1})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Encode(%+v) = %v, want ErrInvalid", h, err)
		}
		if len(b) != 1 {
			t.Errorf("Encode(%+v) wrote %d bytes on error", h, len(b)-1)
		}
	}
}

func TestDecodeRefusesAbsurdCountsBeforeAllocating(t *testing.T) {
	// 2^20 segments declared, none present: refusing it must not allocate
	// anything near 2^20 segments (16 MiB); measured in bytes, so the check
	// holds under the race detector too.
	msg := words(1, 1, 1, 0, 0, 1, 1<<20, 0, 0)
	var h Header
	lim := &Limits{MaxChunkSegments: 1 << 20, MaxSegments: 1 << 20}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 10; i++ {
		h.Writes = nil
		if _, err := h.Decode(msg, lim); !errors.Is(err, ErrShort) {
			t.Fatalf("err = %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 64<<10 {
		t.Errorf("refusing a truncated chunk of 2^20 declared segments allocated %d bytes per decode", per)
	}
}

func TestAppendErrorReply(t *testing.T) {
	call := words(0xcafe, 1, 64, 0, 0, 0, 0)
	if got, want := appendErrorReply(nil, call, headerErr(ErrChunk, 0, "x"), 17), words(0xcafe, 1, 17, 4, 2); !bytes.Equal(got, want) {
		t.Errorf("ERR_CHUNK = %x, want %x", got, want)
	}
	v2 := words(0xbeef, 2, 64, 0, 0, 0, 0)
	var h Header
	_, err := h.Decode(v2, nil)
	if got, want := appendErrorReply([]byte{0xaa}, v2, err, 3), append([]byte{0xaa}, words(0xbeef, 2, 3, 4, 1, 1, 1)...); !bytes.Equal(got, want) {
		t.Errorf("ERR_VERS = %x, want %x", got, want)
	}
	if got, want := appendErrorReply(nil, []byte{1, 2, 3, 4, 5}, ErrShort, 1), words(0x01020304, 1, 1, 4, 2); !bytes.Equal(got, want) {
		t.Errorf("short = %x, want %x", got, want)
	}
	if got, want := appendErrorReply(nil, nil, ErrChunk, 1), words(0, 1, 1, 4, 2); !bytes.Equal(got, want) {
		t.Errorf("empty = %x, want %x", got, want)
	}
	// The replies decode.
	for _, e := range []error{ErrVers, ErrChunk} {
		if _, err := h.Decode(appendErrorReply(nil, call, e, 1), nil); err != nil || h.Proc != ProcError {
			t.Errorf("decode error reply: %v %+v", err, h)
		}
	}
	if shouldAnswer(call, nil) {
		t.Error("shouldAnswer(nil error)")
	}
	if shouldAnswer(call, ErrInvalid) {
		t.Error("shouldAnswer(ErrInvalid)")
	}
	if !shouldAnswer(words(1, 7, 1, 3, 0, 0, 0), ErrVers) {
		t.Error("a version 7 message with proc 3 is not RDMA_DONE")
	}
	if shouldAnswer(words(1, 7, 1, 4, 0, 0, 0), ErrVers) {
		t.Error("RDMA_ERROR of any version must not be answered")
	}
}

func TestCheckCall(t *testing.T) {
	for _, tc := range []struct {
		h    Header
		want error
	}{
		{Header{Proc: ProcMsg}, nil},
		{Header{Proc: ProcMsg, Reads: []ReadSegment{{4, s1}}}, nil},
		{Header{Proc: ProcMsg, Reads: []ReadSegment{{0, s1}}}, ErrChunk},
		{Header{Proc: ProcNoMsg, Reads: []ReadSegment{{0, s1}, {8, s2}}}, nil},
		{Header{Proc: ProcNoMsg, HasReply: true}, ErrChunk},
		{Header{Proc: ProcError}, ErrInvalid},
		{Header{Proc: ProcDone}, ErrInvalid},
	} {
		if err := tc.h.CheckCall(); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("CheckCall(%+v) = %v, want %v", tc.h, err, tc.want)
		}
	}
}

func TestNextReadChunk(t *testing.T) {
	reads := []ReadSegment{{0, s1}, {0, s2}, {8, s3}, {16, s4}, {16, s5}}
	var got [][]ReadSegment
	for c, rest := nextReadChunk(reads); len(c) > 0; c, rest = nextReadChunk(rest) {
		got = append(got, c)
	}
	if len(got) != 3 || len(got[0]) != 2 || len(got[1]) != 1 || len(got[2]) != 2 || got[2][0].Position != 16 {
		t.Fatalf("chunks %v", got)
	}
	if readChunkLen(got[0]) != 4096+4095 {
		t.Errorf("readChunkLen = %d", readChunkLen(got[0]))
	}
	h := Header{Reads: reads}
	if len(h.PositionZero()) != 2 {
		t.Errorf("PositionZero = %v", h.PositionZero())
	}
	h.Reads = reads[2:]
	if h.PositionZero() != nil {
		t.Errorf("PositionZero = %v", h.PositionZero())
	}
	if chunkLen([]Segment{s1, s2, s4}) != 4096+4095+1<<20 {
		t.Error("chunkLen")
	}
}

func TestStrings(t *testing.T) {
	if ProcNoMsg.String() != "RDMA_NOMSG" || Proc(9).String() != "rdma_proc(9)" || ErrcodeChunk.String() != "ERR_CHUNK" ||
		CallLong.String() == "" || ReplyWriteChunk.String() != "write chunk" {
		t.Error("String")
	}
	err := headerErr(ErrShort, 12, "x %d", 1)
	if err.Error() != "rpcrdma: message shorter than its transport header: at byte 12: x 1" {
		t.Errorf("Error() = %q", err.Error())
	}
}

// benchCall is an NFS READ call: a Write chunk and a Reply chunk... as a
// Linux client would send for a 1 MiB read, with the RPC message after it.
func benchMsg() (Header, []byte) {
	h := Header{XID: 0x1234, Vers: 1, Credits: 128, Proc: ProcMsg,
		Writes: [][]Segment{{s1, s2, s4, s5}}}
	b, _ := h.Encode(nil)
	return h, append(b, make([]byte, 140)...)
}

func BenchmarkDecode(b *testing.B) {
	_, msg := benchMsg()
	var h Header
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := h.Decode(msg, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeReadList(b *testing.B) {
	h := Header{XID: 1, Vers: 1, Credits: 128, Proc: ProcMsg,
		Reads: []ReadSegment{{140, s1}, {140, s2}, {140, s4}}}
	msg, _ := h.Encode(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Decode(msg, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	h, _ := benchMsg()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = h.Encode(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckXID(t *testing.T) {
	msg := words(0xabcd, 1, 1, 0, 0, 0, 0, 0xabcd, 0, 2)
	var h Header
	n, err := h.Decode(msg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CheckXID(msg[n:]); err != nil {
		t.Errorf("matching XID: %v", err)
	}
	if err := h.CheckXID(words(0xabce)); !errors.Is(err, ErrChunk) {
		t.Errorf("other XID: %v", err)
	}
	if err := h.CheckXID(msg[n : n+3]); !errors.Is(err, ErrChunk) {
		t.Errorf("short: %v", err)
	}
}
