package mount3

import (
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
)

// FuzzMount decodes every MOUNT v3 argument and result type; what decodes
// must survive a round trip.
func FuzzMount(f *testing.F) {
	xdrtest.Fuzz(f, []xdrtest.Message{
		new(MntArgs),
		new(UmntArgs),
		new(MntRes),
		new(DumpRes),
		new(ExportRes),
	}, samples())
}
