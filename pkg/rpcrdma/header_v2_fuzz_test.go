package rpcrdma

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FuzzDecodeHeader2 feeds arbitrary bytes to Header.Decode2. Nothing may
// panic; what decodes must re-encode to the same bytes and have Len equal
// to what was decoded; every error names an RDMA2_ERROR code, and the
// error reply for it encodes.
func FuzzDecodeHeader2(f *testing.F) {
	for _, c := range wire2Cases() {
		f.Add(c.wire)
	}
	f.Add(words(1, 2, 1, 7, 0xffffffff))
	f.Add(words(1, 2, 1, 7, 1, 5, 4, 9))
	f.Add(words(1, 2, 1, 13, 1, 0xffffffff, 0))
	f.Add(words(1, 1, 1, 0, 0, 0, 0))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 2})
	lim := &Limits{MaxReadSegments: 8, MaxWriteChunks: 3, MaxChunkSegments: 6, MaxSegments: 12}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var h Header
		for _, l := range []*Limits{nil, lim} {
			n, err := h.Decode2(msg, l)
			if err != nil {
				if n != 0 {
					t.Fatalf("n = %d with error %v", n, err)
				}
				var he *HeaderError
				if !errors.As(err, &he) {
					t.Fatalf("error %v is not a HeaderError", err)
				}
				code, max := Errcode2Of(err)
				if code == Err2System {
					t.Fatalf("decode error %v answered RDMA2_ERR_SYSTEM", err)
				}
				b := appendError2(nil, h.XID, h.Vers, 1, Error2{Code: code, MaxChunks: max, MaxSegments: max})
				if len(b) < PrefixLen+4 || len(b) > Error2MaxLen {
					t.Fatalf("error reply of %d bytes", len(b))
				}
				continue
			}
			if n < PrefixLen || n > len(msg) || n%4 != 0 {
				t.Fatalf("n = %d for %d bytes", n, len(msg))
			}
			if h.Len() != n {
				t.Fatalf("Len %d, decoded %d (%v)", h.Len(), n, h.HType)
			}
			enc, err := h.Encode(nil)
			if err != nil {
				t.Fatalf("re-encode %v: %v", h.HType, err)
			}
			if !bytes.Equal(enc, msg[:n]) {
				t.Fatalf("re-encode differs:\n%x\n%x", enc, msg[:n])
			}
			if h.HType == HTypeConnPropMiddle || h.HType == HTypeConnPropFinal {
				if _, err := ParseProperties(h.Props); err != nil && !errors.Is(err, ErrPropVal) {
					t.Fatalf("ParseProperties: %v", err)
				}
			}
		}
	})
}

// FuzzProperties feeds arbitrary bytes as an rpcrdma2_propset to the
// property decoder and ParseProperties: no panic, no allocation beyond the
// count the bytes can hold, errors wrap ErrChunk (the propset's XDR) or
// ErrPropVal (a value), and what decodes re-encodes to the same bytes.
func FuzzProperties(f *testing.F) {
	var buf [20]byte
	f.Add(appendProps(nil, DefaultProperties().AppendProps(nil, &buf)))
	f.Add(words(2, 1, 4, 8192, 5, 4, 9))
	f.Add(words(1, 6, 8, 3, 0x61626300))
	f.Add(words(1, 2, 3, 0x01020300))
	f.Add(words(0xffffffff))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d xdr.Decoder
		d.Reset(b)
		props, err := decodeProps(&d, nil)
		if err != nil {
			if !errors.Is(err, ErrChunk) {
				t.Fatalf("propset error %v does not wrap ErrChunk", err)
			}
			return
		}
		if cap(props) > len(b)/8+1 {
			t.Fatalf("%d props allocated for %d bytes", cap(props), len(b))
		}
		if enc := appendProps(nil, props); !bytes.Equal(enc, b[:d.Offset()]) {
			t.Fatalf("re-encode differs:\n%x\n%x", enc, b[:d.Offset()])
		}
		if _, err := ParseProperties(props); err != nil && !errors.Is(err, ErrPropVal) {
			t.Fatalf("ParseProperties: %v", err)
		}
	})
}
