package fusefs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// TestSendDDPWriteRead writes and reads files through FUSE mounts over
// RPC-over-RDMA version 2 against our export server with send-based DDP
// on (--rdma-send-ddp): with the sddp mount option the WRITE data of
// files up to 60 KiB travels inside the Sends (counted by the server as
// send-based DDP bytes) and READ data comes back the same way, both
// intact; without it (nosddp, the default) nothing goes that way.
func TestSendDDPWriteRead(t *testing.T) {
	needFUSE(t)
	srv := startServerRDMA(t, siw.Config{RTRDelay: -1}, nfsserver.Export{Path: "/"}, rpcrdma.ServerOptions{SendDDP: true, Inline: rpcrdma.SDDPInline})
	for _, extra := range []string{"sddp", ""} {
		t.Run("opts="+extra, func(t *testing.T) {
			dir, _ := srv.mount(t, "rdma", extra)
			for _, n := range []int{4096, 20000, 60 << 10, 200 << 10} {
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(i*13 + n + len(extra))
				}
				before := srv.rdma.Metrics()
				name := "w-" + extra + "-" + string(rune('a'+n%26))
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(srv.root, name))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%d bytes written: server has %d, equal %v, %v", n, len(got), bytes.Equal(got, data), err)
				}
				wrote := srv.rdma.Metrics()
				// A file written on the server, read through the mount
				// (not from the page cache of the write).
				rname := "r-" + name
				if err := os.WriteFile(filepath.Join(srv.root, rname), data, 0o644); err != nil {
					t.Fatal(err)
				}
				got, err = os.ReadFile(filepath.Join(dir, rname))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%d bytes read: %d, equal %v, %v", n, len(got), bytes.Equal(got, data), err)
				}
				read := srv.rdma.Metrics()
				wb, rb := wrote.SendDDPBytes-before.SendDDPBytes, read.SendDDPBytes-wrote.SendDDPBytes
				t.Logf("%d bytes: send-based DDP bytes on WRITE %d, on READ %d", n, wb, rb)
				switch {
				case extra == "" && (wb != 0 || rb != 0):
					t.Fatalf("nosddp: send-based DDP used (%d, %d)", wb, rb)
				case extra == "sddp" && n <= 60<<10 && (wb != uint64(n) || rb != uint64(n)):
					t.Fatalf("sddp: %d of %d WRITE bytes and %d READ bytes by send-based DDP", wb, n, rb)
				}
			}
		})
	}
}
