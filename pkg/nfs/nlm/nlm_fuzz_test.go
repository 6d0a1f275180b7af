package nlm

import (
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FuzzNLM decodes every NLM v4 type from arbitrary bytes: no panic, and
// what decodes survives an encode/decode round trip.
func FuzzNLM(f *testing.F) {
	kinds := []func() Message{
		func() Message { return new(Lock) },
		func() Message { return new(Holder) },
		func() Message { return new(Share) },
		func() Message { return new(TestArgs) },
		func() Message { return new(LockArgs) },
		func() Message { return new(CancArgs) },
		func() Message { return new(UnlockArgs) },
		func() Message { return new(ShareArgs) },
		func() Message { return new(NotifyArgs) },
		func() Message { return new(SMStatus) },
		func() Message { return new(TestRes) },
		func() Message { return new(Res) },
		func() Message { return new(ShareRes) },
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
		used := d.Offset()
		b := encode(v)
		if len(b) != used {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(b), used)
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
