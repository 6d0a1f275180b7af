package metrics_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// The export server's READ mapping metrics, end to end: two READs of one
// window through our client over TCP are a miss then a hit, one window is
// mapped under its bound, and a REMOVE in the volume unmaps it.
func TestReadMapMetrics(t *testing.T) {
	e := exporttest.Start(t, exporttest.Options{Quota: 1 << 30, ReadMapBytes: 2 * nfsserver.ReadMapWindow})
	ctx := testenv.Context(t, 30*time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(counters.NewReadMapCollector(e.Srv.ReadMapStats))
	url := metrics.ServeReg(t, reg) + "/metrics"

	data := bytes.Repeat([]byte("mapped page cache "), 100000)
	if err := os.WriteFile(filepath.Join(e.Root, "vol", "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	nfsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.NFSPort))
	c, err := client.Mount(ctx, client.Options{Server: "127.0.0.1", MountPort: e.MntPort, Export: "/vol",
		Dial: sunrpc.TCPDialer(nfsAddr, sunrpc.TCPOptions{}), Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lr, err := c.Lookup(ctx, c.Root(), "f")
	if err != nil || lr.Status != nfs3.OK {
		t.Fatal("LOOKUP:", lr.Status, err)
	}
	buf := make([]byte, 1<<20)
	for _, off := range []uint64{0, 1 << 20} {
		n, _, _, err := c.Read(ctx, lr.Object, off, buf)
		if err != nil || !bytes.Equal(buf[:n], data[off:min(int(off)+len(buf), len(data))]) {
			t.Fatalf("READ at %d: %d, %v", off, n, err)
		}
	}
	s := metrics.Scrape(t, nil, url)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "miss"), 1},
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "hit"), 1},
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "fault"), 0},
		{"nfsrdma_server_read_map_bytes", nil, nfsserver.ReadMapWindow},
		{"nfsrdma_server_read_map_windows", nil, 1},
		{"nfsrdma_server_read_map_limit_bytes", nil, 2 * nfsserver.ReadMapWindow},
	} {
		if v := metrics.MustValue(t, s, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if rr, err := c.Remove(ctx, c.Root(), "f"); err != nil || rr.Status != nfs3.OK {
		t.Fatal("REMOVE:", rr.Status, err)
	}
	s = metrics.Scrape(t, nil, url)
	if v := metrics.MustValue(t, s, "nfsrdma_server_read_map_bytes", nil); v != 0 {
		t.Errorf("mapped bytes after REMOVE %v, want 0", v)
	}
	if v := metrics.MustValue(t, s, "nfsrdma_server_read_map_evictions_total", nil); v != 1 {
		t.Errorf("evictions after REMOVE %v, want 1", v)
	}
}
