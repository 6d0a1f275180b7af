package rpcrdma

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// sddpWire are encoded headers of the extension, seeds of the fuzzers.
func sddpWire() [][]byte {
	var out [][]byte
	for _, h := range []Header{
		{XID: 7, Vers: Version2, Credits: 3, Header2: Header2{HType: HTypeCallSDDP, SDDP: SDDP{PSLen: 120, Items: 1, Disp: 40, Length: 5000, TBSN: []uint32{0, 1}}}},
		{XID: 7, Vers: Version2, Credits: 3, Writes: [][]Segment{{{Handle: 1, Length: 4096, Offset: 8}}}, Header2: Header2{HType: HTypeCallSDDP, SDDP: SDDP{PSLen: 64}}},
		{XID: 8, Vers: Version2, Credits: 3, Header2: Header2{HType: HTypeReplySDDP, SDDP: SDDP{PSLen: 32, Items: 1, Disp: 28, Length: 9, Offset: 4, TBSN: []uint32{3}}}},
		{XID: 9, Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeXmitErr, XmitErr: XmitErr{Bad: XmsID{XID: 9}, Code: XmitErrBadTBSN, Value: 20, Max: 14}}},
		{XID: 9, Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeXmitErr, XmitErr: XmitErr{Bad: XmsID{XID: 9, Dir: 1, Seq: 2}, HasLead: true, Lead: XmsID{XID: 9, Seq: 1}, Code: XmitErrBadSeq, Expect: 1, Current: 2}}},
		{XID: 9, Vers: Version2, Credits: 1, Header2: Header2{HType: HTypeXmitErr, XmitErr: XmitErr{Code: XmitErrBadCont}}},
		{XID: 10, Vers: Version2, Credits: 4, Header2: Header2{HType: HTypeCallSDDPMiddle, XNum: 3}},
		{XID: 11, Vers: Version2, Credits: 4, Header2: Header2{HType: HTypeReplySDDPMiddle}},
	} {
		b, err := h.Encode(nil)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzDecodeSDDPHeader feeds arbitrary bytes under the extension's
// header types to Header.Decode2: nothing panics, what decodes
// re-encodes to the same bytes with Len equal to what was read, and
// every error names an RDMA2_ERROR code other than RDMA2_ERR_SYSTEM.
func FuzzDecodeSDDPHeader(f *testing.F) {
	for _, w := range sddpWire() {
		f.Add(w)
	}
	f.Add(words(1, 2, 1, 18, 0, 0, 0, 0, 0, 2))
	f.Add(words(1, 2, 1, 18, 0, 0, 0, 0, 16, 1, 0, 8, 2, 0, 0xffffffff))
	f.Add(words(1, 2, 1, 20, 1, 2, 0, 0, 9))
	f.Add(words(1, 2, 1, 21))
	f.Add(words(1, 2, 1, 22, 0xffffffff, 7))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var h Header
		n, err := h.Decode2(msg, nil)
		if err != nil {
			var he *HeaderError
			if n != 0 || !errors.As(err, &he) {
				t.Fatalf("n %d, error %v", n, err)
			}
			if code, _ := Errcode2Of(err); code == Err2System {
				t.Fatalf("decode error %v answered RDMA2_ERR_SYSTEM", err)
			}
			return
		}
		if h.Len() != n {
			t.Fatalf("Len %d, decoded %d", h.Len(), n)
		}
		b, err := h.Encode(nil)
		if err != nil {
			switch h.HType {
			case HTypeCallSDDP, HTypeReplySDDP, HTypeXmitErr, HTypeCallSDDPMiddle, HTypeReplySDDPMiddle:
				t.Fatalf("%v decodes but does not encode: %v", h.HType, err)
			}
			return
		}
		if !bytes.Equal(b, msg[:n]) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", b, msg[:n])
		}
	})
}

// FuzzDecodeRecvBufStruct: any property value decodes to a structure
// that re-encodes to it and whose window lies inside the buffer, or to
// an RDMA2_ERR_BAD_PROPVAL error; nothing panics.
func FuzzDecodeRecvBufStruct(f *testing.F) {
	rb, _ := ourRBStruct(64 << 10)
	f.Add(rb.Append(nil))
	f.Add(words(8192, 2, 1, 4096, 4096, 0, 1, 4096, 4096, 1))
	f.Add(words(0, 0))
	f.Add(words(12, 3, 1, 4, 0, 1, 1, 4, 0, 0, 1, 4, 0, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeRecvBufStruct(data)
		if err != nil {
			if !errors.Is(err, ErrPropVal) {
				t.Fatalf("error %v is not ErrPropVal", err)
			}
			return
		}
		if !bytes.Equal(b.Append(nil), data) {
			t.Fatal("does not re-encode")
		}
		if w, ok := b.window(); ok && (w.Start < 0 || w.Size <= 0 || w.Start+w.Size > int(b.Length) || w.Segs*w.SegLen != w.Size) {
			t.Fatalf("window %+v of a %d-byte buffer", w, b.Length)
		}
	})
}

// FuzzLocateSDDP: whatever rpcrdma2_sddp a message carries, the receiver
// either answers a Transmit Error or returns a stream and an item inside
// the message that do not overlap, the item in the DDP-targetable
// window; nothing panics and nothing can be appended past the message.
func FuzzLocateSDDP(f *testing.F) {
	f.Add(uint32(100), uint32(4), uint32(5000), uint32(0), uint32(0), uint32(2), 10000)
	f.Add(uint32(100), uint32(4), uint32(3), uint32(4092), uint32(14), uint32(1), 65536)
	f.Add(uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), 64)
	f.Add(uint32(0xffffffff), uint32(0xfffffffc), uint32(0xffffffff), uint32(0xfffffffc), uint32(0xffffffff), uint32(3), 5000)
	rb, _ := ourRBStruct(64 << 10)
	w, _ := rb.window()
	buf := make([]byte, 64<<10)
	f.Fuzz(func(t *testing.T, pslen, disp, length, offset, first, segs uint32, n int) {
		if n < 48 || n > len(buf) {
			return
		}
		s := SDDP{PSLen: pslen, Items: 1, Disp: disp, Length: length, Offset: offset}
		for i := range segs % 20 {
			s.TBSN = append(s.TBSN, first+i)
		}
		if len(s.TBSN) == 0 {
			s.Items = 0
		}
		msg := buf[:n]
		stream, item, xe := w.locate(msg, 48, &s, XmsID{})
		if xe != nil {
			if xe.Code < XmitErrBadOff || xe.Code > XmitErrBadPL {
				t.Fatalf("code %v", xe.Code)
			}
			return
		}
		if len(stream) != int(pslen) || cap(stream) != len(stream) || cap(item) != len(item) {
			t.Fatalf("stream %d/%d, item %d/%d", len(stream), cap(stream), len(item), cap(item))
		}
		if item == nil {
			return
		}
		off := int(uintptr(unsafe.Pointer(unsafe.SliceData(item))) - uintptr(unsafe.Pointer(&msg[0])))
		if len(item) > 0 && (off < w.Start || off < 48+int(pslen) || off+len(item) > n || off+len(item) > w.Start+w.Size) {
			t.Fatalf("item at %d, %d bytes: outside the window or over the stream (ends %d)", off, len(item), 48+pslen)
		}
		if len(item) != int(length) {
			t.Fatalf("item of %d bytes, want %d", len(item), length)
		}
	})
}

// FuzzPlanRBStruct feeds arbitrary RDMA2_PROPID_RBSTRUCT values (a
// peer's Receive Buffer Structure, from the network) and message sizes
// to the sender's side: nothing panics; a structure the sender can use
// yields a layout within the limit, and the receiver with that same
// structure locates the Payload stream and the item the sender laid out,
// byte for byte; one it cannot use is refused (the sender then uses
// chunks).
func FuzzPlanRBStruct(f *testing.F) {
	for _, in := range []int{8192, 16 << 10, 64 << 10} {
		rb, _ := ourRBStruct(in)
		f.Add(rb.Append(nil), uint16(100), uint16(120), uint32(5000), uint32(in))
	}
	odd := RecvBufStruct{Length: 4096 + 3*512 + 64, Groups: []RBGroup{
		{Count: 1, Seg: RBSeg{Length: 4096}},
		{Count: 3, Seg: RBSeg{Length: 512, Flags: RBSegDDP}},
		{Count: 1, Seg: RBSeg{Length: 64, Flags: RBSegDDP}},
	}}
	f.Add(odd.Append(nil), uint16(64), uint16(8), uint32(1000), uint32(8192))
	first := RecvBufStruct{Length: 8192, Groups: []RBGroup{{Count: 2, Seg: RBSeg{Length: 4096, Flags: RBSegDDP}}}}
	f.Add(first.Append(nil), uint16(64), uint16(8), uint32(100), uint32(8192))
	f.Fuzz(func(t *testing.T, prop []byte, hl, sl uint16, il, limit uint32) {
		rb, err := DecodeRecvBufStruct(prop)
		if err != nil {
			return
		}
		w, ok := rb.window()
		if !ok {
			return
		}
		if w.Start < 0 || w.SegLen <= 0 || w.Size != w.Segs*w.SegLen || w.Start+w.Size > int(rb.Length) {
			t.Fatalf("window %+v of %+v", w, rb)
		}
		limit = min(limit, 1<<20)
		hl = max(hl&^3, 28)
		sl &^= 3
		il = min(il, 1<<20)
		s, n, ok := w.plan(int(hl), int(sl), int(il), int(limit), nil)
		if !ok {
			return
		}
		if n > int(limit) || n < w.Start+int(il) || int(hl)+s.len()+int(sl) > w.Start {
			t.Fatalf("plan %+v: %d bytes, limit %d, window %+v", s, n, limit, w)
		}
		hdr := int(hl) + s.len()
		buf := make([]byte, n)
		for i := range hdr {
			buf[i] = 0xaa
		}
		stream := bytes.Repeat([]byte{0x5c}, int(sl))
		item := bytes.Repeat([]byte{0xd7}, int(il))
		msg := w.layout(buf, hdr, [][]byte{stream}, item, n)
		s.Disp = uint32(sl)
		gotStream, gotItem, xe := w.locate(msg, hdr, &s, XmsID{})
		if xe != nil || !bytes.Equal(gotStream, stream) || !bytes.Equal(gotItem, item) {
			t.Fatalf("located %d and %d bytes, %v", len(gotStream), len(gotItem), xe)
		}
	})
}

// FuzzLocateSDDPGroup: whatever rpcrdma2_sddp ends a transmission group
// of 1 to 17 Sends of any lengths, the receiver either answers a
// Transmit Error about one of its Sends or returns pieces that lie each
// in one Send's DDP-targetable window (never over the final Send's
// header and stream, never past what a Send brought), whose lengths add
// up to the item's; nothing panics.
func FuzzLocateSDDPGroup(f *testing.F) {
	f.Add(uint32(100), uint32(4), uint32(40000), uint32(0), uint32(0), uint32(10), uint8(3), uint16(16384), 8000)
	f.Add(uint32(100), uint32(4), uint32(8), uint32(4092), uint32(2), uint32(2), uint8(1), uint16(4100), 4200)
	f.Add(uint32(0xffffffff), uint32(0), uint32(0xffffffff), uint32(0), uint32(0xffffffff), uint32(64), uint8(16), uint16(0xffff), 16384)
	f.Add(uint32(8), uint32(8), uint32(24576), uint32(0), uint32(0), uint32(6), uint8(1), uint16(10), 16384)
	rb, _ := ourRBStruct(SDDPInline)
	w, _ := rb.window()
	bufs := make([][]byte, 17)
	for i := range bufs {
		bufs[i] = make([]byte, SDDPInline)
	}
	f.Fuzz(func(t *testing.T, pslen, disp, length, offset, first, segs uint32, mids uint8, midLen uint16, n int) {
		if n < 48 || n > SDDPInline {
			return
		}
		k := int(mids % 17)
		ml := min(int(midLen), SDDPInline)
		parts := make([][]byte, k)
		for i := range parts {
			parts[i] = bufs[i][:ml]
		}
		msg := bufs[16][:n]
		s := SDDP{PSLen: pslen, Items: 1, Disp: disp, Length: length, Offset: offset}
		for i := range segs % (MaxTBSN + 1) {
			s.TBSN = append(s.TBSN, first+i)
		}
		stream, vec, xe := w.locateGroup(parts, msg, 48, &s, XmsID{XID: 5}, nil)
		if xe != nil {
			if xe.Code != XmitErrBadCont && (xe.Code < XmitErrBadOff || xe.Code > XmitErrBadPL) || xe.Bad.Seq > uint32(k) || xe.Bad.XID != 5 {
				t.Fatalf("Transmit Error %+v", xe)
			}
			return
		}
		if len(stream) != int(pslen) || cap(stream) != len(stream) {
			t.Fatalf("stream %d/%d", len(stream), cap(stream))
		}
		total := 0
		for _, p := range vec {
			total += len(p)
			if cap(p) != len(p) || len(p) == 0 {
				t.Fatalf("piece %d/%d", len(p), cap(p))
			}
			in := false
			for j, b := range append(parts, msg) {
				lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
				q := uintptr(unsafe.Pointer(&p[0]))
				if q < lo || q+uintptr(len(p)) > lo+uintptr(len(b)) {
					continue
				}
				off := int(q - lo)
				if off < w.Start || off+len(p) > w.Start+w.Size || j == k && off < 48+int(pslen) {
					t.Fatalf("piece at %d of Send %d, %d bytes: outside the window or over the stream", off, j, len(p))
				}
				in = true
			}
			if !in {
				t.Fatal("a piece outside the Sends received")
			}
		}
		if total != int(length) {
			t.Fatalf("pieces of %d bytes, item of %d", total, length)
		}
	})
}
