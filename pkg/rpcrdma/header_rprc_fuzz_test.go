package rpcrdma

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeRPRC feeds arbitrary bytes behind an RDMA2_REPLY_READ or
// RDMA2_DONE prefix to Header.Decode2, and arbitrary values to the
// PropRPRC parser: nothing panics; a decoded RDMA2_REPLY_READ has a Read
// chunk of Position-zero segments only and re-encodes to the same bytes;
// every error names an RDMA2_ERROR code other than RDMA2_ERR_SYSTEM; a
// property value is accepted exactly when it is 0 or 4 bytes.
func FuzzDecodeRPRC(f *testing.F) {
	rr := Header{XID: 1, Vers: 2, Credits: 3, Writes: [][]Segment{{segA}}, Reads: []ReadSegment{{Segment: segB}},
		Header2: Header2{HType: HTypeReplyRead, InvHandle: segB.Handle}}
	b, _ := rr.Encode(nil)
	f.Add(uint8(0), b[PrefixLen:])
	f.Add(uint8(0), words(0, 0, 1, 0, 1, 2, 3, 4, 0))
	f.Add(uint8(0), words(0, 0, 1, 4, 1, 2, 3, 4, 0))
	f.Add(uint8(0), words(0, 1, 0xffffffff, 0, 0))
	f.Add(uint8(1), words(0x1234))
	f.Add(uint8(1), []byte{1, 2})
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		ht := HTypeReplyRead
		if kind&1 == 1 {
			ht = HTypeDone
		}
		msg := append(words(7, 2, 5, uint32(ht)), body...)
		var h Header
		n, err := h.Decode2(msg, nil)
		if err != nil {
			if code, _ := Errcode2Of(err); code == Err2System || n != 0 {
				t.Fatalf("error %v: code %v, n %d", err, code, n)
			}
		} else {
			if h.HType == HTypeReplyRead {
				if len(h.Reads) == 0 {
					t.Fatal("RDMA2_REPLY_READ without a Read chunk decoded")
				}
				for _, r := range h.Reads {
					if r.Position != 0 {
						t.Fatalf("Read segment at position %d", r.Position)
					}
				}
			}
			if h.Len() != n {
				t.Fatalf("Len %d, decoded %d", h.Len(), n)
			}
			enc, err := h.Encode(nil)
			if err != nil || !bytes.Equal(enc, msg[:n]) {
				t.Fatalf("re-encode: %v\n%x\n%x", err, enc, msg[:n])
			}
		}
		flags, err := parseRPRC([]Prop{{Which: PropRPRC, Data: body}})
		switch {
		case len(body) == 0 || len(body) == 4:
			if err != nil || len(body) == 4 && flags != be.Uint32(body) {
				t.Fatalf("value % x: %#x, %v", body, flags, err)
			}
		case !errors.Is(err, ErrPropVal):
			t.Fatalf("value of %d bytes: %v, want ErrPropVal", len(body), err)
		}
	})
}
