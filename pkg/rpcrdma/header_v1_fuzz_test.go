package rpcrdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzDecodeHeader feeds arbitrary bytes to Header.Decode and, when they
// decode, to everything a responder does next: the checks, the reply plan,
// the reply header and its encoding. Nothing may panic; what decodes must
// re-encode to the same bytes; errors must carry their sentinels.
func FuzzDecodeHeader(f *testing.F) {
	for _, c := range wireCases {
		f.Add(c.wire)
	}
	for _, h := range roundTrips {
		if b, err := h.Encode(nil); err == nil {
			f.Add(b)
		}
	}
	f.Add(words(1, 1, 1, 3))
	f.Add(words(1, 2, 1, 0, 0, 0, 0))
	f.Add(words(1, 1, 1, 0, 0, 1, 0xffffffff, 0, 0))
	f.Add(words(1, 1, 1, 1, 0, 0, 0))
	f.Add([]byte{1, 2, 3})

	lim := &Limits{MaxReadSegments: 8, MaxWriteChunks: 3, MaxChunkSegments: 6, MaxSegments: 12}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var h Header
		for _, l := range []*Limits{nil, lim} {
			n, err := h.Decode(msg, l)
			answer := shouldAnswer(msg, err)
			er := appendErrorReply(nil, msg, err, 7)
			if len(er) != ErrorChunkLen && len(er) != ErrorVersLen {
				t.Fatalf("error reply of %d bytes", len(er))
			}
			if err != nil {
				if n != 0 {
					t.Fatalf("n = %d with error %v", n, err)
				}
				if !errors.Is(err, ErrVers) && !errors.Is(err, ErrChunk) {
					t.Fatalf("error %v wraps neither ErrVers nor ErrChunk", err)
				}
				if answer && len(msg) < MinHeaderLen {
					t.Fatal("answering a message shorter than 28 bytes")
				}
				continue
			}
			if answer {
				t.Fatal("answering a message that decoded")
			}
			if n < FixedLen || n > len(msg) || n%4 != 0 {
				t.Fatalf("n = %d for %d bytes", n, len(msg))
			}
			if h.Proc == ProcDone {
				if n != FixedLen {
					t.Fatalf("RDMA_DONE n = %d", n)
				}
				continue
			}
			if h.Len() != n {
				t.Fatalf("Len %d, decoded %d", h.Len(), n)
			}
			enc, err := h.Encode(nil)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if !bytes.Equal(enc, msg[:n]) {
				t.Fatalf("re-encode differs:\n%x\n%x", enc, msg[:n])
			}
			if h.Proc == ProcError || h.CheckCall() != nil {
				continue
			}
			// Respond with sizes taken from the message itself.
			var sz [3]uint32
			for i := range sz {
				if len(msg) >= n+4*(i+1) {
					sz[i] = binary.BigEndian.Uint32(msg[n+4*i:])
				}
			}
			reply := Message{Head: int(sz[0]%(1<<16)) &^ 3, Payload: int(sz[1] % (1 << 20)), Tail: int(sz[2]%64) &^ 3, DDP: sz[2]&1 == 1}
			p, err := planReply(reply, &h, 1024)
			if err != nil {
				if !errors.Is(err, ErrChunk) {
					t.Fatalf("planReply: %v", err)
				}
				continue
			}
			if p.Proc == ProcMsg && p.HeaderLen+p.InlineLen > 1024 {
				t.Fatalf("plan overruns inline: %+v", p)
			}
			var r Header
			r.BuildReply(&h, p, 1)
			b, err := r.Encode(nil)
			if err != nil {
				t.Fatalf("encode reply %+v: %v", r, err)
			}
			if len(b) != p.HeaderLen {
				t.Fatalf("reply header %d bytes, planned %d", len(b), p.HeaderLen)
			}
			var d Header
			if _, err := d.Decode(b, &Limits{MaxReadSegments: 1 << 20, MaxWriteChunks: 1 << 20, MaxChunkSegments: 1 << 20, MaxSegments: 1 << 20}); err != nil {
				t.Fatalf("decode reply: %v", err)
			}
			if err := d.CheckReply(&h); err != nil {
				t.Fatalf("CheckReply: %v", err)
			}
		}
	})
}
