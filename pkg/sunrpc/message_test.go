package sunrpc

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func TestBuilderPayload(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 5, 4097} {
		payload := bytes.Repeat([]byte{0xab}, n)
		b := NewBuilder(nil)
		b.Uint32(7)
		b.Payload(payload)
		b.Uint32(9)
		b.Payload([]byte{1, 2}) // a second item goes inline
		m := b.Message()
		if !m.HasPayload || len(m.Payload) != n || (n > 0 && &m.Payload[0] != &payload[0]) {
			t.Fatalf("n=%d: payload not by reference", n)
		}
		if len(m.Head) != 8 || binary.BigEndian.Uint32(m.Head[4:]) != uint32(n) {
			t.Fatalf("n=%d: head %x does not end with the length word", n, m.Head)
		}
		// The flattened message is exactly what an encoder writing the
		// payload inline would produce.
		e := xdr.NewEncoder(nil)
		e.Uint32(7)
		e.Opaque(payload)
		e.Uint32(9)
		e.Opaque([]byte{1, 2})
		if got := m.AppendTo(nil); !bytes.Equal(got, e.Bytes()) || m.Len() != len(got) {
			t.Fatalf("n=%d: flattened %x (Len %d), want %x", n, got, m.Len(), e.Bytes())
		}
	}
	b := NewBuilder(nil)
	b.Uint32(1)
	if m := b.Message(); m.HasPayload || len(m.Tail) != 0 || m.Len() != 4 {
		t.Fatalf("no-payload message %+v", m)
	}
	ran := 0
	b.AfterSend(func() { ran++ })
	b.RunAfterSend()
	b.RunAfterSend()
	if ran != 1 {
		t.Fatalf("AfterSend hook ran %d times", ran)
	}
}

func TestMarkPayload(t *testing.T) {
	b := NewBuilder(nil)
	b.Uint32(7)
	b.Uint32(5) // the item's length word, encoded by the caller
	b.MarkPayload([]byte("hello"))
	b.Uint32(9)
	m := b.Message()
	if !m.HasPayload || string(m.Payload) != "hello" || len(m.Head) != 8 || len(m.Tail) != 4 {
		t.Fatalf("message %+v", m)
	}
	want := []byte{0, 0, 0, 7, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0, 0, 0, 0, 9}
	if got := m.AppendTo(nil); string(got) != string(want) {
		t.Fatalf("wire % x, want % x", got, want)
	}
}
