package sunrpc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TestRequestPayloadVec: a DDP-eligible argument placed in pieces
// (ArgPayloadVec) is handed on as the pieces by PayloadVec and joined by
// Payload, after its length word is checked against their total and the
// maximum; one placed whole, or inline, is one piece.
func TestRequestPayloadVec(t *testing.T) {
	word := func(n uint32) []byte {
		e := xdr.NewEncoder(nil)
		e.Uint32(n)
		return e.Bytes()
	}
	vec := [][]byte{bytes.Repeat([]byte{1}, 8), bytes.Repeat([]byte{2}, 5)}
	var r Request
	r.Reset(nil, nil, nil, "rdma")
	r.ArgPayloadVec = vec
	if !r.Placed() || r.ArgPayloadLen() != 13 {
		t.Fatalf("placed %v, %d bytes", r.Placed(), r.ArgPayloadLen())
	}
	if got := r.PayloadVec(xdr.NewDecoder(word(13)), 100); len(got) != 2 || &got[1][0] != &vec[1][0] {
		t.Fatalf("PayloadVec: %d pieces", len(got))
	}
	if got := r.Payload(xdr.NewDecoder(word(13)), 100); !bytes.Equal(got, append(append([]byte(nil), vec[0]...), vec[1]...)) {
		t.Fatalf("Payload: %v", got)
	}
	d := xdr.NewDecoder(word(12))
	if r.PayloadVec(d, 100) != nil || !errors.Is(d.Err(), ErrMalformed) {
		t.Fatalf("length word 12: %v", d.Err())
	}
	d = xdr.NewDecoder(word(13))
	if r.Payload(d, 10) != nil || !errors.Is(d.Err(), xdr.ErrTooLong) {
		t.Fatalf("over the maximum: %v", d.Err())
	}
	r.Reset(nil, vec[0], nil, "rdma")
	if r.ArgPayloadVec != nil || r.ArgPayloadLen() != 8 {
		t.Fatal("Reset kept the vector")
	}
	if got := r.PayloadVec(xdr.NewDecoder(word(8)), 100); len(got) != 1 || &got[0][0] != &vec[0][0] {
		t.Fatalf("one piece: %d", len(got))
	}
	r.Reset(nil, nil, nil, "tcp")
	inline := append(word(3), 'a', 'b', 'c', 0)
	if got := r.PayloadVec(xdr.NewDecoder(inline), 100); len(got) != 1 || string(got[0]) != "abc" || r.Placed() {
		t.Fatalf("inline: %q", got)
	}
}
