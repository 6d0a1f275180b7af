package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// mapServer serves a new temporary root ("/" exported) with READ mappings
// bounded by limit bytes and mounts it with our client over proto ("tcp"
// or "rdma": RPC-over-RDMA over software iWARP); both end with the test.
func mapServer(t *testing.T, proto string, limit int64) (*Server, *client.Client, string) {
	t.Helper()
	return mapServerOn(t, proto, nil, limit)
}

// mapServerOn is mapServer with NFS/RDMA served on dev (nil: software
// iWARP).
func mapServerOn(t *testing.T, proto string, dev verbs.Device, limit int64) (*Server, *client.Client, string) {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	root := t.TempDir()
	var log *slog.Logger
	if dev != nil {
		log = slog.New(slog.NewTextHandler(&logs, nil))
	}
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/"}}, ReadMapBytes: limit, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return srv, serveOurClientOn(t, srv, proto, dev, 2, nil, nil), root
}

// serveOurClient serves srv (NFS and MOUNT over loopback TCP and, for
// proto "rdma", NFS over RPC-over-RDMA on software iWARP up to version
// vers, 16 credits) and mounts its export "/" with our client over proto,
// its RPC-over-RDMA counted in rdma (nil or) and its dialer wrapped by wrap
// (nil or); the mount, the serving and srv end with the test.
func serveOurClient(t *testing.T, srv *Server, proto string, vers int, rdma *rpcrdma.ClientMetrics, wrap func(sunrpc.DialFunc) sunrpc.DialFunc) *client.Client {
	t.Helper()
	return serveOurClientOn(t, srv, proto, nil, vers, rdma, wrap)
}

// serveOurClientOn is serveOurClient with NFS/RDMA served on dev (nil:
// software iWARP).
func serveOurClientOn(t *testing.T, srv *Server, proto string, dev verbs.Device, vers int, rdma *rpcrdma.ClientMetrics, wrap func(sunrpc.DialFunc) sunrpc.DialFunc) *client.Client {
	t.Helper()
	if dev == nil {
		dev = siw.NewDevice(siw.Config{RTRDelay: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	nfsL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mountL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	servers := 1
	go func() { served <- srv.Serve(ctx, nfsL, mountL) }()
	opts := client.Options{
		Server:    "127.0.0.1",
		NFSPort:   nfsL.Addr().(*net.TCPAddr).Port,
		MountPort: mountL.Addr().(*net.TCPAddr).Port,
		Export:    "/",
		AuthSys:   sunrpc.AuthSysParams{MachineName: "test"},
		WrapDial:  wrap,
	}
	if proto == "rdma" {
		l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for NFS/RDMA
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		servers++
		go func() {
			served <- serveRDMA(ctx, srv, dev, addr, rpcrdma.ServerOptions{Credits: 16, MaxVersion: vers})
		}()
		opts.Transport = "rdma"
		opts.Dial = rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), addr, rpcrdma.ClientOptions{Metrics: rdma, MaxVersion: vers})
	}
	c, err := client.Mount(ctx, opts)
	if err != nil {
		cancel()
		t.Fatal("mount:", err)
	}
	t.Cleanup(func() {
		c.Unmount(context.Background())
		cancel()
		for range servers {
			<-served
		}
		srv.Close()
	})
	return c
}

// TestReadMapped reads a 20 MiB file through a server whose READ mappings
// are bounded to two 4 MiB windows, over TCP and over RDMA, at random
// offsets and sizes (unaligned, across window edges, past the end) and
// checks every byte; then a WRITE through the server lands in a mapped
// window and the next READ returns it; the counters show hits, misses,
// evictions and copies, the mapped bytes never exceed the bound, and a
// REMOVE unmaps the file's windows.
//
// "rdma-pre6.2" serves NFS/RDMA on a device that refuses to register
// read-only shared file mappings, as the ibverbs provider on Linux before
// 6.2 does: the responder finds out once, at start, and registers copies
// of READ data (one refusal in all, the data the same).
func TestReadMapped(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma", "rdma-pre6.2"} {
		t.Run(proto, func(t *testing.T) {
			const limit = 2 * ReadMapWindow
			var dev *pre62Device
			if proto == "rdma-pre6.2" {
				dev = &pre62Device{Device: siw.NewDevice(siw.Config{RTRDelay: -1})}
				proto = "rdma"
			}
			srv, c, root := mapServerOn(t, proto, dev.orNil(), limit)
			if dev != nil && dev.refused.Load() != 1 {
				t.Fatalf("%d registrations of file mappings refused before the first READ, want 1 (the responder's probe at start)", dev.refused.Load())
			}
			ctx := context.Background()
			data := make([]byte, 5*ReadMapWindow-12345)
			r := rand.New(rand.NewPCG(3, 4))
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			if err := os.WriteFile(filepath.Join(root, "f"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			lr, err := c.Lookup(ctx, c.Root(), "f")
			if err != nil || lr.Status != nfs3.OK {
				t.Fatal("LOOKUP:", lr.Status, err)
			}
			fh := lr.Object
			buf := make([]byte, MaxIO)
			check := func(off, n int) {
				t.Helper()
				got, eof, _, err := c.Read(ctx, fh, uint64(off), buf[:n])
				if err != nil {
					t.Fatalf("READ %d@%d: %v", n, off, err)
				}
				want := data[min(off, len(data)):min(off+n, len(data))]
				if !bytes.Equal(buf[:got], want) {
					t.Fatalf("READ %d@%d: %d bytes differ from the file's %d", n, off, got, len(want))
				}
				if eof != (off+got >= len(data)) {
					t.Fatalf("READ %d@%d: eof %v", n, off, eof)
				}
				if st := srv.ReadMapStats(); st.Mapped > limit {
					t.Fatalf("mapped %d bytes over the bound %d", st.Mapped, limit)
				}
			}
			check(0, MaxIO)
			check(ReadMapWindow-100, 200) // across a window edge
			check(ReadMapWindow, MaxIO)   // a window's first byte
			check(2*ReadMapWindow-1, 1)   // a window's last byte
			check(len(data)-10, 100)      // past the end
			check(len(data)-10, 20)       // past the end, in the last page
			check(len(data)+5, 100)       // beyond the end
			for i := 0; i < 300; i++ {
				check(r.IntN(len(data)+1000), 1+r.IntN(MaxIO))
			}
			// a WRITE to a mapped window is seen by the next READ
			patch := bytes.Repeat([]byte("written through the server "), 1000)
			off := 3*ReadMapWindow + 777
			check(off, len(patch))
			wr, err := c.Write(ctx, fh, uint64(off), patch, nfs3.Unstable)
			if err != nil || wr.Status != nfs3.OK || int(wr.Count) != len(patch) {
				t.Fatal("WRITE:", wr.Status, wr.Count, err)
			}
			copy(data[off:], patch)
			check(off-1, len(patch)+2)
			st := srv.ReadMapStats()
			t.Logf("%+v", st)
			if st.Hits == 0 || st.Misses == 0 || st.Evictions == 0 || st.Copied == 0 || st.Limit != limit || st.Windows > 2 {
				t.Fatalf("counters %+v: want hits, misses, evictions and copies, at most 2 windows", st)
			}
			rr, err := c.Remove(ctx, c.Root(), "f")
			if err != nil || rr.Status != nfs3.OK {
				t.Fatal("REMOVE:", rr.Status, err)
			}
			if st := srv.ReadMapStats(); st.Mapped != 0 || st.Windows != 0 {
				t.Fatalf("after REMOVE: %+v, want nothing mapped", st)
			}
			if dev != nil {
				if !strings.Contains(logs.String(), "the device cannot register file mappings") {
					t.Errorf("the server's log does not say the device cannot register file mappings:\n%s", logs.String())
				}
				if n := dev.refused.Load(); n != 1 {
					t.Fatalf("%d registrations of file mappings refused, want 1 (the responder's probe at start)", n)
				}
				if srv.RDMAMetrics().WriteChunks == 0 {
					t.Fatal("no READ data went in Write chunks")
				}
			}
		})
	}
}

// logs is what mapServerOn's servers on a device of their own log.
var logs testenv.Buffer

// pre62Device is a verbs.Device whose protection domains refuse to
// register memory of a shared file mapping without write permission
// (EFAULT), as the ibverbs provider does on Linux before 6.2, whose
// ib_umem_get pins a region without write access with
// FOLL_WRITE|FOLL_FORCE. refused counts the refusals.
type pre62Device struct {
	verbs.Device
	refused atomic.Int64
}

// orNil is d as a verbs.Device, nil for a nil d.
func (d *pre62Device) orNil() verbs.Device {
	if d == nil {
		return nil
	}
	return d
}

func (d *pre62Device) AllocPD() (verbs.PD, error) {
	pd, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return pre62PD{PD: pd, d: d}, nil
}

type pre62PD struct {
	verbs.PD
	d *pre62Device
}

func (p pre62PD) RegMR(b []byte, access verbs.Access) (verbs.MR, error) {
	if len(b) > 0 && readOnlySharedMapping(uintptr(unsafe.Pointer(&b[0]))) {
		p.d.refused.Add(1)
		return nil, unix.EFAULT
	}
	return p.PD.RegMR(b, access)
}

// readOnlySharedMapping reports whether addr lies in a shared mapping
// without write permission ("r--s" in /proc/self/maps).
func readOnlySharedMapping(addr uintptr) bool {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(maps)) {
		var lo, hi uintptr
		var perms string
		if _, err := fmt.Sscanf(line, "%x-%x %s", &lo, &hi, &perms); err == nil && lo <= addr && addr < hi {
			return perms == "r--s"
		}
	}
	return false
}

// TestReadMapOff: with ReadMapBytes 0 READ copies (pread) and maps nothing.
func TestReadMapOff(t *testing.T) {
	srv, c, root := mapServer(t, "tcp", 0)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := os.WriteFile(filepath.Join(root, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lr, err := c.Lookup(ctx, c.Root(), "f")
	if err != nil || lr.Status != nfs3.OK {
		t.Fatal("LOOKUP:", lr.Status, err)
	}
	buf := make([]byte, len(data))
	n, _, _, err := c.Read(ctx, lr.Object, 0, buf)
	if err != nil || !bytes.Equal(buf[:n], data) {
		t.Fatalf("READ: %d, %v", n, err)
	}
	if st := srv.ReadMapStats(); st != (ReadMapStats{}) {
		t.Fatalf("counters %+v with the path off", st)
	}
}

// TestReadMapTruncateRace reads a mapped file with four readers while
// another writer truncates it to random sizes and writes it back, under
// the race detector too: the server must not crash (a page past the end
// faults under the mapping), and every byte a READ returns is the file's
// (the pattern, or zero where a truncation left a hole), never another
// offset's.
func TestReadMapTruncateRace(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) {
			srv, c, root := mapServer(t, proto, 4*ReadMapWindow)
			const size = 2 * ReadMapWindow
			pat := make([]byte, size)
			for i := range pat {
				pat[i] = byte(1 + i%251) // no zero byte
			}
			name := filepath.Join(root, "f")
			if err := os.WriteFile(name, pat, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			lr, err := c.Lookup(ctx, c.Root(), "f")
			if err != nil || lr.Status != nfs3.OK {
				t.Fatal("LOOKUP:", lr.Status, err)
			}
			var wg sync.WaitGroup
			var reads, errs atomic.Int64
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 9))
					buf := make([]byte, MaxIO)
					for ctx.Err() == nil {
						off := r.IntN(size)
						n, _, _, err := c.Read(ctx, lr.Object, uint64(off), buf[:1+r.IntN(MaxIO)])
						if err != nil {
							if ctx.Err() == nil {
								errs.Add(1)
							}
							continue
						}
						reads.Add(1)
						for i, b := range buf[:n] {
							if b != 0 && b != pat[off+i] {
								t.Errorf("READ at %d: byte %d is %d, want %d or 0", off, i, b, pat[off+i])
								return
							}
						}
					}
				}()
			}
			f, err := os.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r := rand.New(rand.NewPCG(7, 7))
			truncs := 0
			for ctx.Err() == nil {
				if err := f.Truncate(int64(r.IntN(size))); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
				if _, err := f.WriteAt(pat, 0); err != nil {
					t.Fatal(err)
				}
				truncs++
			}
			wg.Wait()
			st := srv.ReadMapStats()
			t.Logf("%d READs, %d failed calls, %d truncations, %+v", reads.Load(), errs.Load(), truncs, st)
			if reads.Load() == 0 || st.Hits == 0 {
				t.Fatal("no READ answered from a mapping")
			}
			// the server still answers
			buf := make([]byte, 100)
			if _, _, _, err := c.Read(context.Background(), lr.Object, 0, buf); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal("READ after the storm:", err)
			}
		})
	}
}
