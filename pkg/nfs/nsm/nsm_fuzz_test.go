package nsm

import (
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FuzzNSM decodes every NSM v1 type from arbitrary bytes: no panic, and
// what decodes survives an encode/decode round trip.
func FuzzNSM(f *testing.F) {
	kinds := []func() Message{
		func() Message { return new(SMName) },
		func() Message { return new(MyID) },
		func() Message { return new(MonID) },
		func() Message { return new(Mon) },
		func() Message { return new(StatRes) },
		func() Message { return new(Stat) },
		func() Message { return new(StatChge) },
	}
	for _, s := range samples() {
		for i, k := range kinds {
			if reflect.TypeOf(k()) == reflect.TypeOf(s.v) {
				f.Add(uint8(i), encode(s.v))
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, msg []byte) {
		v := kinds[int(kind)%len(kinds)]()
		d := xdr.NewDecoder(msg)
		if err := v.Decode(d); err != nil {
			return
		}
		b := encode(v)
		if len(b) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(b), d.Offset())
		}
		v2 := fresh(v)
		d2 := xdr.NewDecoder(b)
		if err := v2.Decode(d2); err != nil || d2.Remaining() != 0 {
			t.Fatalf("re-decode: %v, %d left", err, d2.Remaining())
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip mismatch\n%+v\n%+v", v, v2)
		}
	})
}
