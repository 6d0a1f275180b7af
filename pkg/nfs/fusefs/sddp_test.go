package fusefs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// TestSendDDPWriteRead writes and reads files through FUSE mounts over
// RPC-over-RDMA version 2 against our export server with send-based DDP
// on (--rdma-send-ddp, the default): by default, and with the sddp mount
// option, the WRITE data of files up to 12 KiB (rpcrdma.SDDPInline less
// the header page) travels inside the Sends (counted by the server as
// send-based DDP bytes), with sddpgroups up to 192 KiB (16 Sends) as a
// transmission group, and READ data comes back the same way, both
// intact, odd sizes included; larger files go in chunks, intact; with
// nosddp nothing goes that way.
func TestSendDDPWriteRead(t *testing.T) {
	needFUSE(t)
	srv := startServerRDMA(t, siw.Config{RTRDelay: -1}, nfsserver.Export{Path: "/"}, rpcrdma.ServerOptions{SendDDP: true, Inline: rpcrdma.SDDPInline})
	// Up to a transmission group of MaxContinuation Sends of one window.
	const maxGroup = rpcrdma.MaxContinuation * (rpcrdma.SDDPInline - rpcrdma.PageSize)
	for _, extra := range []string{"", "sddp", "sddpgroups", "nosddp"} {
		t.Run("opts="+extra, func(t *testing.T) {
			limit := rpcrdma.SDDPInline - rpcrdma.PageSize
			if extra == "sddpgroups" {
				limit = maxGroup
			}
			var mu sync.Mutex
			var conns []*rpcrdma.Client
			kept := func() (n uint64) {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range conns {
					n = max(n, c.Metrics().SendDDPKept) // shared by a mount's connections
				}
				return n
			}
			dir, _ := srv.mountWith(t, "rdma", extra, func(dial sunrpc.DialFunc) sunrpc.DialFunc {
				return func(ctx context.Context) (sunrpc.ClientTransport, error) {
					tr, err := dial(ctx)
					if c, ok := tr.(*rpcrdma.Client); ok {
						mu.Lock()
						conns = append(conns, c)
						mu.Unlock()
					}
					return tr, err
				}
			})
			for _, n := range []int{4096, 10001, rpcrdma.SDDPInline - rpcrdma.PageSize, 20000, 64 << 10, 128<<10 + 5, 200 << 10} {
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(i*13 + n + len(extra))
				}
				before := srv.rdma.Metrics()
				name := "w-" + extra + "-" + strconv.Itoa(n)
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
				keptBefore := kept()
				got, err = os.ReadFile(filepath.Join(dir, rname))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%d bytes read: %d, equal %v, %v", n, len(got), bytes.Equal(got, data), err)
				}
				read := srv.rdma.Metrics()
				wb, rb := wrote.SendDDPBytes-before.SendDDPBytes, read.SendDDPBytes-wrote.SendDDPBytes
				t.Logf("%d bytes: send-based DDP bytes on WRITE %d, on READ %d", n, wb, rb)
				switch {
				case extra == "nosddp" && (wb != 0 || rb != 0):
					t.Fatalf("nosddp: send-based DDP used (%d, %d)", wb, rb)
				case extra != "nosddp" && n <= limit && (wb != uint64(n) || rb != uint64(n)):
					t.Fatalf("%s: %d of %d WRITE bytes and %d READ bytes by send-based DDP", extra, wb, n, rb)
				case n > limit && (wb != 0 || rb != 0):
					t.Fatalf("%s: %d of %d WRITE bytes and %d READ bytes by send-based DDP", extra, wb, n, rb)
				case rb != 0 && kept() == keptBefore:
					// The READ data went to the kernel from the receive
					// buffers, not copied (client.ReadPlaced).
					t.Fatalf("%s: %d bytes: READ data by send-based DDP copied, not handed to FUSE", extra, n)
				}
			}
			// More reads than the mount has credits (16): the receive
			// buffers handed to FUSE come back once it wrote them.
			data := bytes.Repeat([]byte{0x3c}, 10000)
			if err := os.WriteFile(filepath.Join(srv.root, "again"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			for i := range 48 {
				f, err := os.Open(filepath.Join(dir, "again"))
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
					t.Fatal(err)
				}
				k, err := io.ReadFull(f, buf)
				f.Close()
				if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(buf[:k], data) {
					t.Fatalf("read %d: %d bytes, %v", i, k, err)
				}
			}
		})
	}
}

// BenchmarkFUSEExtensions: FUSE I/O through mounts over RPC-over-RDMA
// version 2 against our export server with both extensions announced
// (send-based DDP at rpcrdma.SDDPInline, responder-provided Read
// chunks), the mount with its defaults (both on), nosddp, and norprc, in
// one run: sequential write (1 MiB writes, fsync) and read (1 MiB reads,
// page cache dropped) of a 64 MiB file, and files of 8, 32, 64 and 128
// KiB written (fsync) and read back (page cache dropped) per iteration,
// the sizes send-based DDP carries (in one Send, or a transmission
// group). The server's send_ddp bytes per operation are
// reported.
func BenchmarkFUSEExtensions(b *testing.B) {
	testenv.NeedRootFUSE(b)
	const seq = 64 << 20
	// 8 KiB: one Send; 32, 64 and 128 KiB: transmission groups of 3, 6
	// and 11 Sends.
	smalls := []int{8 << 10, 32 << 10, 64 << 10, 128 << 10}
	srv := startServerRDMA(b, siw.Config{RTRDelay: -1}, nfsserver.Export{Path: "/"}, rpcrdma.ServerOptions{SendDDP: true, Inline: rpcrdma.SDDPInline})
	writeSeq(b, filepath.Join(srv.root, "seq-r"), randBytes(MaxWrite, 3), seq)
	for _, mode := range []string{"default", "sddpgroups", "nosddp", "norprc"} {
		extra := mode
		if mode == "default" {
			extra = ""
		}
		dir, _ := srv.mount(b, "rdma", extra)
		run := func(name string, n int64, op func(b *testing.B, i int)) {
			b.Run(mode+"/"+name, func(b *testing.B) {
				b.SetBytes(n)
				before := srv.rdma.Metrics()
				i := 0
				for b.Loop() {
					op(b, i)
					i++
				}
				b.ReportMetric(float64(srv.rdma.Metrics().SendDDPBytes-before.SendDDPBytes)/float64(i), "sddpB/op")
			})
		}
		buf := randBytes(MaxWrite, 3)
		run("seq-write-64MiB", seq, func(b *testing.B, i int) {
			p := filepath.Join(dir, "seq-w")
			writeSeq(b, p, buf, seq)
			b.StopTimer()
			if err := os.Remove(p); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		})
		run("seq-read-64MiB", seq, func(b *testing.B, i int) {
			readDropped(b, filepath.Join(dir, "seq-r"), buf, seq)
		})
		for _, small := range smalls {
			data := randBytes(small, 4)
			name := strconv.Itoa(small>>10) + "KiB"
			run("write-"+name, int64(small), func(b *testing.B, i int) {
				if err := writeSync(filepath.Join(dir, "small-w-"+name), data); err != nil {
					b.Fatal(err)
				}
			})
			if err := os.WriteFile(filepath.Join(srv.root, "small-r-"+name), data, 0o644); err != nil {
				b.Fatal(err)
			}
			run("read-"+name, int64(small), func(b *testing.B, i int) {
				readDropped(b, filepath.Join(dir, "small-r-"+name), buf, int64(small))
			})
		}
	}
}

// readDropped reads the file at path whole with reads of len(buf), after
// dropping its pages from the mount's page cache, and checks it has size
// bytes.
func readDropped(b *testing.B, path string, buf []byte, size int64) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal("fadvise DONTNEED:", err)
	}
	var total int64
	for {
		k, err := f.Read(buf)
		total += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatalf("read at %d: %v", total, err)
		}
	}
	if total != size {
		b.Fatalf("read %d bytes, want %d", total, size)
	}
}
