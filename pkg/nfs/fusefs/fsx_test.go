package fusefs

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"golang.org/x/sys/unix"
)

// The fsx exerciser (after xfstests' ltp/fsx.c): a seeded random sequence
// of operations on one file through the mount, mirrored on a reference
// file on a local disk and compared after every operation. Reproduce a
// failure with the seed it prints:
//
//	go test -run 'TestFsx/rdma' ./pkg/nfs/fusefs -args -fsx.seed=N -fsx.ops=M
//
// or FSX_SEED=N FSX_OPS=M in the environment.
var (
	fsxSeed = flag.Uint64("fsx.seed", 0, "seed of TestFsx (0: from the clock, or $FSX_SEED)")
	fsxOps  = flag.Int("fsx.ops", 0, "operations of TestFsx per transport (0: $FSX_OPS or 2500)")
)

// File layout of the exerciser: most operations fall in the low window;
// some in the high window, past 4 GiB, which leaves a sparse hole of about
// 4 GiB between the two (never read whole: sampled).
const (
	fsxLowEnd    = 8 << 20
	fsxHighStart = 4<<30 - 256<<10
	fsxHighEnd   = 4<<30 + 8<<20
	fsxMaxLen    = 128 << 10 // pread/pwrite length
	fsxMaxMapLen = 64 << 10  // mmap'd read/write length
)

func fsxParams(t *testing.T) (seed uint64, ops int) {
	seed, ops = *fsxSeed, *fsxOps
	if seed == 0 {
		if s, err := strconv.ParseUint(os.Getenv("FSX_SEED"), 10, 64); err == nil {
			seed = s
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	if ops == 0 {
		if n, err := strconv.Atoi(os.Getenv("FSX_OPS")); err == nil && n > 0 {
			ops = n
		}
	}
	if ops == 0 {
		ops = 2500
	}
	return seed, ops
}

// TestFsx runs the exerciser over TCP and over RPC-over-RDMA against our
// export server: pread, pwrite, truncate (grow and shrink), writes far
// past EOF (holes, offsets past 4 GiB), reads and writes through a
// MAP_SHARED mapping (msync), fsync and close+reopen; then checks the
// whole file (every written region, the size, samples of the holes)
// through the mount, through an O_DIRECT descriptor (the server's data,
// not the page cache) after close and reopen, and on the server's disk.
func TestFsx(t *testing.T) {
	needFUSE(t)
	seed, ops := fsxParams(t)
	for i, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			srv := startServer(t)
			dir, _ := srv.mount(t, proto, "")
			s := seed + uint64(i)
			x := newFsx(t, s, filepath.Join(dir, "fsx-file"), filepath.Join(t.TempDir(), "fsx-ref"))
			defer x.close()
			start := time.Now()
			x.run(ops)
			x.fullCheck("the end", x.f)
			x.reopen()
			x.fullCheck("after close and reopen", x.f)
			x.closeFile()
			direct, err := os.OpenFile(x.path, os.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				x.failf("open O_DIRECT: %v", err)
			}
			x.fullCheck("through O_DIRECT", direct)
			direct.Close()
			disk, err := os.Open(filepath.Join(srv.root, "fsx-file"))
			if err != nil {
				x.failf("the server's file: %v", err)
			}
			x.fullCheck("on the server's disk", disk)
			disk.Close()
			t.Logf("seed %d: %d operations %v in %v", s, ops, x.counts, time.Since(start).Round(time.Millisecond))
		})
	}
}

type extent struct{ off, end int64 }

type fsx struct {
	t        *testing.T
	seed     uint64
	r        *rand.Rand
	path     string
	f        *os.File // through the mount
	ref      *os.File // reference, on a local disk
	scratch  *os.File // local: bytes to and from mappings (see mapped)
	size     int64    // the reference's size
	log      []string // the operations so far
	written  []extent // every range written, for fullCheck
	counts   map[string]int
	buf, got []byte
}

func newFsx(t *testing.T, seed uint64, path, refPath string) *fsx {
	x := &fsx{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, 0x5eed)), path: path, counts: map[string]int{},
		buf: make([]byte, fsxMaxLen), got: make([]byte, fsxMaxLen+8192)}
	var err error
	if x.f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
		t.Fatal(err)
	}
	if x.ref, err = os.OpenFile(refPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
		t.Fatal(err)
	}
	if x.scratch, err = os.Create(refPath + ".scratch"); err != nil {
		t.Fatal(err)
	}
	t.Logf("fsx seed %d (rerun with -args -fsx.seed=%d, or FSX_SEED=%d)", seed, seed, seed)
	return x
}

func (x *fsx) close() {
	x.closeFile()
	x.ref.Close()
	x.scratch.Close()
}

func (x *fsx) closeFile() {
	if x.f != nil {
		if err := x.f.Close(); err != nil {
			x.failf("close: %v", err)
		}
		x.f = nil
	}
}

// failf fails the test with the seed and the last operations.
func (x *fsx) failf(format string, args ...any) {
	x.t.Helper()
	last := x.log[max(0, len(x.log)-15):]
	x.t.Fatalf("fsx seed %d, after %d operations: %s\nlast operations:\n\t%s\nrerun: go test -run '%s' ./pkg/nfs/fusefs -args -fsx.seed=%d -fsx.ops=%d",
		x.seed, len(x.log), fmt.Sprintf(format, args...), strings.Join(last, "\n\t"), x.t.Name(), x.seed, len(x.log))
}

func (x *fsx) logf(format string, args ...any) {
	x.log = append(x.log, fmt.Sprintf("%d: ", len(x.log)+1)+fmt.Sprintf(format, args...))
}

// offset picks an offset for an operation of n bytes: mostly in the low
// window, sometimes in the high one, sometimes around EOF.
func (x *fsx) offset(n int) int64 {
	switch p := x.r.IntN(100); {
	case p < 15:
		return fsxHighStart + x.r.Int64N(fsxHighEnd-fsxHighStart-int64(n))
	case p < 30 && x.size > 0:
		return max(0, min(x.size+x.r.Int64N(64<<10)-32<<10, fsxHighEnd-int64(n)))
	default:
		return x.r.Int64N(fsxLowEnd - int64(n))
	}
}

func (x *fsx) run(ops int) {
	for range ops {
		switch p := x.r.IntN(100); {
		case p < 25:
			x.read()
		case p < 50:
			x.write()
		case p < 60:
			x.truncate()
		case p < 72:
			x.mapRead()
		case p < 90:
			x.mapWrite()
		case p < 94:
			x.fsync()
		case p < 97:
			x.reopen()
		default:
			x.holeWrite()
		}
		x.checkSize()
	}
}

func (x *fsx) fill(n int) []byte {
	b := x.buf[:n]
	tag := byte(len(x.log))
	for i := 0; i < n; i += 8 {
		v := x.r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v>>(8*j)) ^ tag
		}
	}
	return b
}

func (x *fsx) read() {
	n := 1 + x.r.IntN(fsxMaxLen)
	off := x.offset(n)
	x.counts["read"]++
	x.logf("read %#x +%#x (size %#x)", off, n, x.size)
	x.compare("read", x.f, off, n)
}

func (x *fsx) write() {
	n := 1 + x.r.IntN(fsxMaxLen)
	x.writeAt("write", x.offset(n), n)
}

// holeWrite writes well past EOF, leaving a hole.
func (x *fsx) holeWrite() {
	n := 1 + x.r.IntN(4096)
	off := x.size + 1<<20 + x.r.Int64N(16<<20)
	if off+int64(n) > fsxHighEnd {
		off = fsxHighStart + x.r.Int64N(fsxHighEnd-fsxHighStart-int64(n))
	}
	x.writeAt("hole write", off, n)
	x.compare("hole below the write", x.f, max(0, off-4096), 4096)
}

func (x *fsx) writeAt(what string, off int64, n int) {
	b := x.fill(n)
	x.counts[what]++
	x.logf("%s %#x +%#x (size %#x)", what, off, n, x.size)
	if k, err := x.f.WriteAt(b, off); err != nil || k != n {
		x.failf("%s %#x +%#x: %d, %v", what, off, n, k, err)
	}
	if _, err := x.ref.WriteAt(b, off); err != nil {
		x.t.Fatal(err)
	}
	x.size = max(x.size, off+int64(n))
	x.written = append(x.written, extent{off, off + int64(n)})
	x.compare(what, x.f, off-64, n+128)
}

func (x *fsx) truncate() {
	var size int64
	switch p := x.r.IntN(100); {
	case p < 50:
		size = x.r.Int64N(fsxLowEnd)
	case p < 65:
		size = fsxHighStart + x.r.Int64N(fsxHighEnd-fsxHighStart)
	default:
		size = max(0, min(x.size+x.r.Int64N(128<<10)-64<<10, fsxHighEnd))
	}
	x.counts["truncate"]++
	x.logf("truncate %#x -> %#x", x.size, size)
	if err := x.f.Truncate(size); err != nil {
		x.failf("truncate to %#x: %v", size, err)
	}
	if err := x.ref.Truncate(size); err != nil {
		x.t.Fatal(err)
	}
	old := x.size
	x.size = size
	x.compare("around the new EOF", x.f, size-8192, 16384)
	if size > old {
		// The grown part reads as zeros.
		x.compare("grown part", x.f, old, int(min(size-old, fsxMaxLen)))
	}
}

// mapped runs f on a MAP_SHARED mapping of [off, off+n) of the file
// (the mapping starts at the page below off), then msyncs a writable
// mapping (MS_SYNC).
//
// f must touch the mapping only through system calls (pread/pwrite of
// the scratch file): this process also serves the FUSE mount, and a page
// fault taken in Go code waits for a FUSE READ that the process's other
// goroutines cannot serve once the garbage collector stops the world,
// which waits for the faulting thread: a deadlock. A fault inside a system
// call leaves the goroutine in the syscall state, which the collector
// does not wait for.
func (x *fsx) mapped(what string, prot int, off int64, n int, f func(m []byte)) {
	page := int64(os.Getpagesize())
	base := off &^ (page - 1)
	m, err := unix.Mmap(int(x.f.Fd()), base, int(off-base)+n, prot, unix.MAP_SHARED)
	if err != nil {
		x.failf("%s: mmap %#x +%#x: %v", what, base, int(off-base)+n, err)
	}
	defer func() {
		if err := unix.Munmap(m); err != nil {
			x.failf("munmap: %v", err)
		}
	}()
	f(m[off-base:])
	if prot&unix.PROT_WRITE != 0 {
		if err := unix.Msync(m, unix.MS_SYNC); err != nil {
			x.failf("%s: msync: %v", what, err)
		}
	}
}

func (x *fsx) mapRead() {
	if x.size == 0 {
		return
	}
	n := 1 + x.r.IntN(fsxMaxMapLen)
	off := x.offset(n)
	if off+int64(n) > x.size { // a mapping past EOF faults
		off = max(0, x.size-int64(n))
		n = int(min(int64(n), x.size))
	}
	x.counts["mapread"]++
	x.logf("mapread %#x +%#x (size %#x)", off, n, x.size)
	want := make([]byte, n)
	if _, err := x.ref.ReadAt(want, off); err != nil {
		x.t.Fatal(err)
	}
	got := make([]byte, n)
	x.mapped("mapread", unix.PROT_READ, off, n, func(m []byte) {
		// The kernel reads the mapping (see mapped).
		if k, err := unix.Pwrite(int(x.scratch.Fd()), m[:n], 0); err != nil || k != n {
			x.failf("mapread %#x +%#x: copying out of the mapping: %d, %v", off, n, k, err)
		}
	})
	if _, err := x.scratch.ReadAt(got, 0); err != nil {
		x.t.Fatal(err)
	}
	if i := mismatch(got, want); i >= 0 {
		x.failf("mapread %#x +%#x: byte at %#x is %#02x, want %#02x", off, n, off+int64(i), got[i], want[i])
	}
}

// mapWrite writes through a shared mapping and msyncs it; the file is
// first extended (ftruncate) when the range passes EOF, as fsx does.
func (x *fsx) mapWrite() {
	n := 1 + x.r.IntN(fsxMaxMapLen)
	off := x.offset(n)
	b := x.fill(n)
	x.counts["mapwrite"]++
	x.logf("mapwrite %#x +%#x (size %#x)", off, n, x.size)
	if end := off + int64(n); end > x.size {
		if err := x.f.Truncate(end); err != nil {
			x.failf("mapwrite: extend to %#x: %v", end, err)
		}
		if err := x.ref.Truncate(end); err != nil {
			x.t.Fatal(err)
		}
		x.size = end
	}
	if _, err := x.scratch.WriteAt(b, 0); err != nil {
		x.t.Fatal(err)
	}
	x.mapped("mapwrite", unix.PROT_READ|unix.PROT_WRITE, off, n, func(m []byte) {
		// The kernel writes the mapping (see mapped).
		if k, err := unix.Pread(int(x.scratch.Fd()), m[:n], 0); err != nil || k != n {
			x.failf("mapwrite %#x +%#x: copying into the mapping: %d, %v", off, n, k, err)
		}
	})
	if _, err := x.ref.WriteAt(b, off); err != nil {
		x.t.Fatal(err)
	}
	x.written = append(x.written, extent{off, off + int64(n)})
	x.compare("mapwrite", x.f, off-64, n+128)
}

func (x *fsx) fsync() {
	x.counts["fsync"]++
	x.logf("fsync")
	if err := x.f.Sync(); err != nil {
		x.failf("fsync: %v", err)
	}
}

func (x *fsx) reopen() {
	x.counts["close+open"]++
	x.logf("close and reopen")
	x.closeFile()
	var err error
	if x.f, err = os.OpenFile(x.path, os.O_RDWR, 0); err != nil {
		x.failf("reopen: %v", err)
	}
}

func (x *fsx) checkSize() {
	st, err := x.f.Stat()
	if err != nil {
		x.failf("fstat: %v", err)
	}
	if st.Size() != x.size {
		x.failf("size %#x, want %#x", st.Size(), x.size)
	}
}

// compare reads [off, off+n) (clipped at 0) from f and from the reference
// and fails on any difference, in the bytes or in the count read (EOF).
func (x *fsx) compare(what string, f *os.File, off int64, n int) {
	if off < 0 {
		n += int(off)
		off = 0
	}
	if n <= 0 {
		return
	}
	for n > 0 {
		k := min(n, fsxMaxLen)
		got, want := x.got[:k], x.buf[:k]
		gn, gerr := readFull(f, got, off)
		wn, werr := readFull(x.ref, want, off)
		if werr != nil {
			x.t.Fatal(werr)
		}
		if gerr != nil {
			x.failf("%s: read %#x +%#x: %v", what, off, k, gerr)
		}
		if gn != wn {
			x.failf("%s: read %#x +%#x: %d bytes, want %d (size %#x)", what, off, k, gn, wn, x.size)
		}
		if i := mismatch(got[:gn], want[:wn]); i >= 0 {
			x.failf("%s: byte at %#x is %#02x, want %#02x (read %#x +%#x)", what, off+int64(i), got[i], want[i], off, k)
		}
		off += int64(k)
		n -= k
	}
}

// fullCheck compares everything the operations could have written
// (every written range, merged, with a page either side), 16 pages
// sampled elsewhere (holes, and parts cut by a truncate then grown
// again), the last page and the size.
func (x *fsx) fullCheck(what string, f *os.File) {
	x.t.Helper()
	st, err := f.Stat()
	if err != nil {
		x.failf("%s: fstat: %v", what, err)
	}
	if st.Size() != x.size {
		x.failf("%s: size %#x, want %#x", what, st.Size(), x.size)
	}
	ext := slices.Clone(x.written)
	for range 16 {
		if x.size > 0 {
			off := x.r.Int64N(x.size) &^ 4095
			ext = append(ext, extent{off, off + 4096})
		}
	}
	ext = append(ext, extent{max(0, x.size-4096), x.size + 4096})
	slices.SortFunc(ext, func(a, b extent) int { return int(a.off - b.off) })
	var merged []extent
	for _, e := range ext {
		e.off, e.end = max(0, e.off-4096), e.end+4096
		if k := len(merged); k > 0 && e.off <= merged[k-1].end {
			merged[k-1].end = max(merged[k-1].end, e.end)
			continue
		}
		merged = append(merged, e)
	}
	for _, e := range merged {
		x.compare(what, f, e.off, int(e.end-e.off))
	}
}

// readFull reads len(b) bytes at off, or up to EOF; it aligns nothing, so
// an O_DIRECT descriptor of FUSE (which has no alignment rule) works too.
func readFull(f *os.File, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		k, err := f.ReadAt(b[n:], off+int64(n))
		n += k
		if err != nil {
			if errors.Is(err, os.ErrClosed) || !isEOF(err) {
				return n, err
			}
			return n, nil
		}
	}
	return n, nil
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// mismatch returns the index of the first differing byte, -1 if none (or
// only the lengths differ).
func mismatch(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
