package mount3

import (
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// FuzzMount decodes every MOUNT v3 argument and result type; what decodes
// must survive a round trip.
func FuzzMount(f *testing.F) {
	kinds := []func() Message{
		func() Message { return new(MntArgs) },
		func() Message { return new(UmntArgs) },
		func() Message { return new(MntRes) },
		func() Message { return new(DumpRes) },
		func() Message { return new(ExportRes) },
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
		if err := v.Decode(xdr.NewDecoder(msg)); err != nil {
			return
		}
		b := encode(v)
		v2 := fresh(v)
		d := xdr.NewDecoder(b)
		if err := v2.Decode(d); err != nil || d.Remaining() != 0 {
			t.Fatalf("re-decode: %v, %d left", err, d.Remaining())
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip mismatch\n%+v\n%+v", v, v2)
		}
	})
}
