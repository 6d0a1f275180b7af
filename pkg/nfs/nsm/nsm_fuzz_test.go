package nsm

import (
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
)

// FuzzNSM decodes every NSM v1 type from arbitrary bytes: no panic, and
// what decodes survives an encode/decode round trip.
func FuzzNSM(f *testing.F) {
	xdrtest.Fuzz(f, []xdrtest.Message{
		new(SMName),
		new(MyID),
		new(MonID),
		new(Mon),
		new(StatRes),
		new(Stat),
		new(StatChge),
	}, samples())
}
