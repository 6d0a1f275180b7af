package nfs3

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// fuzzDecode decodes msg (and payload, when placed) as a value from mk; if
// that succeeds, the value must survive an inline round trip, and for a
// DDP-eligible item the split encoding must give back the item.
func fuzzDecode(t *testing.T, v any, msg, payload []byte, placed bool) {
	if v == nil {
		return
	}
	if _, err := decodeInto(v, msg, payload, placed); err != nil {
		return
	}
	b := encodeInline(v)
	if len(b)%4 != 0 {
		t.Fatalf("re-encoded %d bytes", len(b))
	}
	v2 := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	n, err := decodeInto(v2, b, nil, false)
	if err != nil || n != len(b) {
		t.Fatalf("re-decode: consumed %d of %d: %v", n, len(b), err)
	}
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("round trip mismatch\n%+v\n%+v", v, v2)
	}
	if m, ok := v.(DDPMessage); ok {
		head, item := encodeSplit(m)
		if !bytes.Equal(append(append(head, item...), make([]byte, (4-len(item)%4)%4)...), b) {
			t.Fatal("split encoding differs from inline")
		}
	}
}

func seedFuzz(f *testing.F, samples []sample) {
	for _, s := range samples {
		b := encodeInline(s.v)
		f.Add(uint8(s.proc), false, b, []byte(nil))
		if m, ok := s.v.(DDPMessage); ok {
			head, payload := encodeSplit(m)
			f.Add(uint8(s.proc), true, head, payload)
		}
	}
	f.Add(uint8(ProcReaddir), false, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, []byte(nil))
}

// FuzzArgs decodes the arguments of every procedure (server side).
func FuzzArgs(f *testing.F) {
	seedFuzz(f, argSamples())
	f.Fuzz(func(t *testing.T, proc uint8, placed bool, msg, payload []byte) {
		fuzzDecode(t, newArgs(uint32(proc)%NumProcs), msg, payload, placed)
	})
}

// FuzzResults decodes the results of every procedure (client side).
func FuzzResults(f *testing.F) {
	seedFuzz(f, resSamples())
	f.Fuzz(func(t *testing.T, proc uint8, placed bool, msg, payload []byte) {
		checkLocate(t, uint32(proc)%NumProcs, msg)
		fuzzDecode(t, newRes(uint32(proc)%NumProcs), msg, payload, placed)
	})
}

// FuzzWriteArgsVec decodes WRITE arguments whose data the transport
// placed in pieces (WriteArgs.DecodeVec): a success has Data nil, the
// length word and count equal to the pieces' total, and the same file,
// offset and stable_how as the inline decoding of the joined bytes.
func FuzzWriteArgsVec(f *testing.F) {
	w := WriteArgs{File: fh(8, 3), Offset: 4096, Stable: FileSync, Data: bytesOf(12289, 5)}
	head, item := encodeSplit(&w)
	f.Add(head, item, uint16(4096))
	f.Add(head, item[:100], uint16(7))
	f.Add([]byte{0, 0, 0, 1}, []byte(nil), uint16(0))
	f.Fuzz(func(t *testing.T, msg, payload []byte, cut uint16) {
		c := min(int(cut), len(payload))
		vec := [][]byte{payload[:c], payload[c:]}
		var a WriteArgs
		if err := a.DecodeVec(xdr.NewDecoder(msg), vec, DefaultMaxData); err != nil {
			return
		}
		if a.Data != nil {
			t.Fatal("Data set")
		}
		var b WriteArgs
		if err := b.Decode(xdr.NewDecoder(msg), payload, true); err != nil || len(b.Data) != len(payload) || !bytes.Equal(b.File.Bytes(), a.File.Bytes()) || b.Offset != a.Offset || b.Stable != a.Stable {
			// DecodeVec accepts exactly what Decode accepts of the
			// joined pieces.
			t.Fatalf("vector decoding %+v, joined %+v, %v", a, b, err)
		}
	})
}
