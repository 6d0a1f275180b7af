package metricsource

import (
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/fieldtest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// Every counter of rpcrdma.Metrics reaches metrics.TransportStats under
// its name (Continued is not exported), RDMA2_ERROR codes by name.
func TestTransport(t *testing.T) {
	var m rpcrdma.Metrics
	fieldtest.Fill(&m)
	m.Errors2 = map[rpcrdma.Errcode2]uint64{rpcrdma.Err2Vers: 3, rpcrdma.Err2BadXDR: 4}
	got := Transport(func() rpcrdma.Metrics { return m })()
	fieldtest.Same(t, m, got, "Continued")
	if len(got.Errors2) != 2 || got.Errors2[metrics.Err2VersName] != 3 || got.Errors2[rpcrdma.Err2BadXDR.String()] != 4 {
		t.Errorf("Errors2 %v", got.Errors2)
	}
}

func TestConnections(t *testing.T) {
	var c rpcrdma.ConnInfo
	fieldtest.Fill(&c)
	got := Connections(func() []rpcrdma.ConnInfo { return []rpcrdma.ConnInfo{c} })()
	if len(got) != 1 {
		t.Fatalf("%d connections", len(got))
	}
	fieldtest.Same(t, c, got[0], "Verbs")
}

func TestDRC(t *testing.T) {
	var d nfsserver.DRCStats
	fieldtest.Fill(&d)
	fieldtest.Same(t, d, DRC(func() nfsserver.DRCStats { return d })())
}
