package nlm

import (
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
)

// FuzzNLM decodes every NLM v4 type from arbitrary bytes: no panic, and
// what decodes survives an encode/decode round trip.
func FuzzNLM(f *testing.F) {
	xdrtest.Fuzz(f, []xdrtest.Message{
		new(Lock),
		new(Holder),
		new(Share),
		new(TestArgs),
		new(LockArgs),
		new(CancArgs),
		new(UnlockArgs),
		new(ShareArgs),
		new(NotifyArgs),
		new(SMStatus),
		new(TestRes),
		new(Res),
		new(ShareRes),
	}, samples())
}
