package fusefs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// The FUSE benchmarks run the same work through three mounts,
// each a sub-benchmark, so that hack/bench can pair them:
//
//   - loopback: go-fuse's own loopback file system (fs.NewLoopbackRoot)
//     over a directory on a tmpfs, with FUSE passthrough off (see
//     noPassthroughNode) and splice off (READ data by pread(2), as
//     ours; see mountLoopback), mounted with the FUSE options of our Serve
//     (max_write and max_readahead 1 MiB, direct mount(2), allow_other,
//     the kernel read-ahead of read_ahead_kb's default, 4 MiB) and
//     the kernel cache timeouts of our default mount (entries 30 s =
//     acdirmin, attributes 3 s = acregmin): the FUSE ceiling of this
//     machine, the baseline;
//   - rdma: our mount with default options and credits=16 (the Helm
//     chart's creditsPerPod; the shared test helpers' mount) over
//     RPC-over-RDMA on software iWARP, to our export server over a
//     directory on a tmpfs;
//   - tcp: the same over TCP;
//   - rdma-nocrc (the sequential benchmarks only): rdma with the MPA CRC
//     negotiated off, the mount's nompacrc and the server's siw.Config
//     NoCRC (CRC stays on unless both ends ask, RFC 5044 section 7.1), so
//     that the table shows what CRC32c costs where every byte is checked
//     twice, by the sender and the receiver. The default keeps it on.
//
// Each sub-benchmark mounts a tmpfs of its own (see freshTmpfs) and keeps
// there the loopback's backing directory or our export server's root, and
// the mount point: every mount reads and writes memory, none a disk, and
// no sub-benchmark inherits the page cache, dirty data or freed inodes of
// the one before. -fusebench.seqfs=disk and -fusebench.metafs=disk put
// them in the temp directory's file system instead.
//
// Each runs in this process beside the benchmark's own system calls: the
// FUSE server, and for ours the NFS client and the export server, share
// the machine's cores with it. The benchmarks start no other process.
//
// Sequential write: one iteration creates a file, writes -fusebench.mib
// MiB (default 1024) in 1 MiB write(2)s, then fsync(2)s and close(2)s it,
// so the data is at the backing file system (both the loopback and our
// export server fsync the backing file; on tmpfs that returns at once).
// MB/s is reported. The file is removed with the timer stopped.
//
// Sequential read: a file of the same size is written and fsynced straight
// into the backing directory, not timed. One iteration opens it through
// the mount, drops the mount's page cache of that file with
// posix_fadvise(POSIX_FADV_DONTNEED) on the FUSE file (timer stopped: our
// mount keeps the kernel's cache over an open of an unchanged file, the
// loopback does not), then reads it in 1 MiB read(2)s. The backing file is
// in memory (tmpfs) for both, so every byte goes through FUSE to the file
// system (and, for ours, over the wire from the export server) and neither
// side measures a disk.
//
// Both sequential benchmarks also report cpu-s/GiB: the CPU time (user and
// system) of this process, getrusage(RUSAGE_SELF) plus RUSAGE_CHILDREN
// (zero here: no child process), spent during the timed part of the
// iterations, per GiB moved; usr-s/GiB and sys-s/GiB are its two parts.
// It counts every thread of this process: the benchmark's own read(2) and
// write(2) (the kernel's copy to or from the caller's buffer, the FUSE
// request queueing, the read-ahead it issues), the FUSE server's threads
// (their /dev/fuse reads and writes, which copy the data), and for ours
// the NFS client and the export server (file reads and writes, socket
// sends and receives, CRC32c, software iWARP), loopback TCP's softirq work
// where it runs in a sending thread's context (the kernel charges it to
// the task it interrupts). It leaves out kernel threads (kworkers,
// ksoftirqd when the softirq work is deferred to it) and other processes;
// perf stat -a counts those too. The kernel samples the user/system split
// at its clock tick; the sum is exact.
//
// Metadata: one iteration creates -fusebench.files (default 10,000) empty
// files in a new directory (open O_CREAT|O_EXCL, close), stats each,
// unlinks each, and removes the directory; reported per file (ns/file,
// and files/s, which hack/bench compares), with each phase's share
// (create-ns/file, stat-ns/file, unlink-ns/file). The stats are what a
// program gets on either mount: answered from the kernel's attribute
// cache while it is fresh, by the file system after. On the shared disk
// (-fusebench.metafs=disk), the journal-less ext4 of the test machines
// skips in a create the inodes freed in the last minutes (find_inode_bit,
// recently_deleted), so each sub-benchmark's creates paid for the unlinks
// of the one before (the loopback, first, was spared) and the ratio swung
// from 0.24x to 0.77x with the order of the runs; the tmpfs of each
// sub-benchmark (the default) has no such memory.
var (
	benchMiB    = flag.Int("fusebench.mib", 1024, "MiB written and read per iteration by BenchmarkFUSESeqWrite and BenchmarkFUSESeqRead")
	benchFiles  = flag.Int("fusebench.files", 10000, "files created, stated and unlinked per iteration by BenchmarkFUSEMetadata")
	benchRA     = flag.Int("fusebench.ra", mountopts.DefaultReadAheadKB, "kernel read-ahead of every mount of the benchmarks, in KiB (read_ahead_kb)")
	benchMetaFS = flag.String("fusebench.metafs", "tmpfs", "where BenchmarkFUSEMetadata's mounts keep their files: tmpfs (a fresh tmpfs per sub-benchmark) or disk (the temp directory)")
	benchSeqFS  = flag.String("fusebench.seqfs", "tmpfs", "where BenchmarkFUSESeqWrite's and BenchmarkFUSESeqRead's mounts keep their files: tmpfs (a fresh tmpfs per sub-benchmark) or disk (the temp directory)")
	benchOpts   = flag.String("fusebench.opts", "", "more mount options (nfs(5) vocabulary, comma-separated) of our mounts in the benchmarks, e.g. rsize=262144")
)

// benchMount is a mounted file system under benchmark: mnt is the mount
// point, backing the local directory it shows.
type benchMount struct {
	mnt, backing string
	// check, if set, verifies after the run that the mount used the
	// transport it claims to.
	check func(b *testing.B)
}

// namedMount is a mount of the benchmarks, named as its sub-benchmark.
type namedMount struct {
	name  string
	mount func(b *testing.B) benchMount
}

// benchMounts are the mounts of every FUSE benchmark, baseline first.
var benchMounts = []namedMount{
	{"loopback", mountLoopback},
	{"rdma", func(b *testing.B) benchMount { return mountOurs(b, mountopts.ProtoRDMA, false) }},
	{"tcp", func(b *testing.B) benchMount { return mountOurs(b, mountopts.ProtoTCP, false) }},
	{"tcp-uring", func(b *testing.B) benchMount { return mountOursURing(b, mountopts.ProtoTCP) }},
}

// mountOursURing is mountOurs with fuse_uring=on (the kernel's
// enable_uring set for the sub-benchmark); it checks that the ring served
// the requests.
func mountOursURing(b *testing.B, proto string) benchMount {
	setEnableURing(b, true)
	bm, m := mountOursOpts(b, proto, false, 0, "fuse_uring=on")
	check := bm.check
	bm.check = func(b *testing.B) {
		if st := m.FUSETransport(); st.Transport != fuseuring.TransportIOURing || st.RingRequests == 0 {
			b.Fatalf("FUSE over io_uring not used: %+v", st)
		} else {
			b.ReportMetric(float64(st.RingRequests), "ring-requests")
		}
		check(b)
	}
	return bm
}

// seqMounts are the mounts of the sequential benchmarks: benchMounts and
// rdma-nocrc.
var seqMounts = append(slices.Clip(benchMounts), namedMount{"rdma-nocrc", func(b *testing.B) benchMount { return mountOurs(b, mountopts.ProtoRDMA, true) }})

// mountOurs starts our export server and mounts it over proto with the
// tests' shared helpers (unmounted and stopped at the end of b); noCRC
// negotiates the MPA CRC off at both ends (proto rdma only).
func mountOurs(b *testing.B, proto string, noCRC bool) benchMount {
	return mountOursMap(b, proto, noCRC, 0)
}

// seqReadMounts are the mounts of BenchmarkFUSESeqRead: seqMounts (whose
// server copies READ data with pread) and our mounts whose server answers
// READ from mappings of the file (rdma-map, tcp-map: 256 MiB of windows).
var seqReadMounts = append(slices.Clip(seqMounts),
	namedMount{"rdma-map", func(b *testing.B) benchMount { return mountOursMap(b, mountopts.ProtoRDMA, false, 256<<20) }},
	namedMount{"tcp-map", func(b *testing.B) benchMount { return mountOursMap(b, mountopts.ProtoTCP, false, 256<<20) }})

// mountOursMap is mountOurs with the server's READ mappings bounded by
// readMap bytes (nfsserver.Options.ReadMapBytes; 0: READ copies).
func mountOursMap(b *testing.B, proto string, noCRC bool, readMap int64) benchMount {
	bm, _ := mountOursOpts(b, proto, noCRC, readMap, "")
	return bm
}

// mountOursOpts is mountOursMap with more mount options extra, returning
// the mount too.
func mountOursOpts(b *testing.B, proto string, noCRC bool, readMap int64, extra string) (benchMount, *Mount) {
	srv := startServerOptions(b, siw.Config{RTRDelay: -1, NoCRC: noCRC},
		nfsserver.Options{Exports: []nfsserver.Export{{Path: "/"}}, ReadMapBytes: readMap},
		rpcrdma.ServerOptions{SendDDP: true, Inline: rpcrdma.SDDPInline}) // as driver server runs by default
	o := fmt.Sprintf("read_ahead_kb=%d", *benchRA)
	if noCRC {
		o += ",nompacrc"
	}
	if *benchOpts != "" {
		o += "," + *benchOpts
	}
	if extra != "" {
		o += "," + extra
	}
	dir, mnt := srv.mount(b, proto, o)
	return benchMount{mnt: dir, backing: srv.root, check: func(b *testing.B) {
		m := srv.rdma.Metrics()
		if proto == mountopts.ProtoRDMA && m.Calls == 0 {
			b.Fatalf("no RPC-over-RDMA calls over an RDMA mount: %+v", m)
		} else if proto == mountopts.ProtoTCP && m.Calls != 0 {
			b.Fatalf("RPC-over-RDMA calls over a TCP mount: %+v", m)
		}
		for _, c := range srv.rdma.Connections() {
			if c.Verbs.MPA == nil || c.Verbs.MPA.CRC == noCRC {
				b.Fatalf("connection %s: %v, want CRC %v", c.Peer, c.Verbs, !noCRC)
			}
		}
	}}, mnt
}

// mountLoopback mounts go-fuse's loopback file system over a temp
// directory (on the sub-benchmark's tmpfs, see freshTmpfs) with the FUSE options of our Serve, and unmounts it at the
// end of b (Mount.Unmount: retried while busy, then lazily).
func mountLoopback(b *testing.B) benchMount {
	backing, mnt := b.TempDir(), b.TempDir()
	if _, ok := fs.NewLoopbackFile(-1).(loopbackFile); !ok {
		b.Fatal("go-fuse's loopback file no longer implements loopbackFile: passthrough could not be turned off")
	}
	lroot, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		b.Fatal(err)
	}
	// Every node, the root included, is a noPassthroughNode.
	lr := lroot.(*fs.LoopbackNode).RootData
	root := &noPassthroughNode{&fs.LoopbackNode{RootData: lr}}
	lr.RootNode = root
	defaults := mountopts.Default()
	entry, attr := defaults.ACDirMin, defaults.ACRegMin
	srv, err := fs.Mount(mnt, root, &fs.Options{
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			FsName:            backing,
			Name:              "loopback",
			AllowOther:        true,
			MaxWrite:          MaxWrite,
			MaxReadAhead:      MaxWrite,
			DirectMount:       true,
			DirectMountStrict: true,
			// READ replies by pread(2) and writev(2) to /dev/fuse,
			// as ours: go-fuse's splice of a 1 MiB reply needs a
			// pipe above fs.pipe-max-size's default (1 MiB), and
			// would fail and log once per READ before falling
			// back to the same.
			DisableSplice: true,
		},
	})
	if err != nil {
		b.Fatal("mount loopback:", err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	b.Cleanup(func() {
		if err := (&Mount{server: srv, dir: mnt}).Unmount(5 * time.Second); err != nil {
			b.Error("unmount loopback:", err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Error("loopback FUSE server did not stop after unmount")
		}
		if mounted(b, mnt) {
			b.Errorf("%s still mounted", mnt)
		}
	})
	// the read-ahead of our mounts (read_ahead_kb, -fusebench.ra), so
	// that both read the same way
	if err := SetReadAhead(mnt, *benchRA); err != nil {
		b.Fatal(err)
	}
	return benchMount{mnt: mnt, backing: backing}
}

// noPassthroughNode is go-fuse's loopback node whose open files do not
// offer FUSE passthrough (FOPEN_PASSTHROUGH, Linux 6.9 and later, as
// root): with it the kernel reads and writes the backing file itself and
// the loopback's data path would not be FUSE's at all, while a file system
// whose data is elsewhere, as ours, can never use it. Every READ and WRITE
// then reaches the loopback's process, as they reach ours.
type noPassthroughNode struct{ *fs.LoopbackNode }

// WrapChild makes every node under the root a noPassthroughNode
// (fs.NodeWrapChilder).
func (n *noPassthroughNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &noPassthroughNode{ops.(*fs.LoopbackNode)}
}

func (n *noPassthroughNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return noPassthrough(fh), fl, errno
}

func (n *noPassthroughNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, noPassthrough(fh), fl, errno
}

// loopbackFile is what go-fuse's loopback file implements, less
// fs.FilePassthroughFder.
type loopbackFile interface {
	fs.FileReader
	fs.FileWriter
	fs.FileFlusher
	fs.FileFsyncer
	fs.FileReleaser
	fs.FileGetattrer
	fs.FileSetattrer
	fs.FileLseeker
	fs.FileAllocater
	fs.FileGetlker
	fs.FileSetlker
	fs.FileSetlkwer
	fs.FileStatxer
	fs.FileIoctler
}

// noPassthrough hides the passthrough fd of a loopback file handle.
func noPassthrough(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(loopbackFile); ok {
		return struct{ loopbackFile }{lf}
	}
	return fh
}

// forEachMount runs f as one sub-benchmark per mount of mounts, with
// before (if not nil) run in each sub-benchmark ahead of its mount.
func forEachMount(b *testing.B, mounts []namedMount, before func(b *testing.B), f func(b *testing.B, m benchMount)) {
	testenv.NeedRootFUSE(b)
	for _, bm := range mounts {
		b.Run(bm.name, func(b *testing.B) {
			if before != nil {
				before(b)
			}
			m := bm.mount(b)
			f(b, m)
			if m.check != nil {
				m.check(b)
			}
		})
	}
}

// seqSize is the bytes per iteration of the sequential benchmarks.
func seqSize(b *testing.B) int64 {
	if *benchMiB <= 0 {
		b.Fatalf("-fusebench.mib=%d: want a positive number of MiB", *benchMiB)
	}
	return int64(*benchMiB) << 20
}

// writeSeq creates path and writes size bytes in len(buf) writes, then
// fsyncs and closes it.
func writeSeq(b *testing.B, path string, buf []byte, size int64) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			b.Fatalf("write at %d: %v", off, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		b.Fatal("fsync:", err)
	}
	if err := f.Close(); err != nil {
		b.Fatal("close:", err)
	}
}

// seqBefore is what the sequential benchmarks run in each sub-benchmark
// ahead of its mount: a fresh tmpfs large enough for two files of
// -fusebench.mib MiB (-fusebench.seqfs=tmpfs), or nothing (disk).
func seqBefore(b *testing.B) func(b *testing.B) {
	switch *benchSeqFS {
	case "tmpfs":
		return func(b *testing.B) { freshTmpfs(b, max(4<<30, 2*seqSize(b)+1<<30)) }
	case "disk":
		return nil
	}
	b.Fatalf("-fusebench.seqfs=%q: want tmpfs or disk", *benchSeqFS)
	return nil
}

// cpuTime is the user and system CPU time of this process and its
// waited-for children (getrusage(2) RUSAGE_SELF plus RUSAGE_CHILDREN).
func cpuTime(b *testing.B) (user, sys time.Duration) {
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if err := unix.Getrusage(who, &ru); err != nil {
			b.Fatal("getrusage:", err)
		}
		user += time.Duration(ru.Utime.Nano())
		sys += time.Duration(ru.Stime.Nano())
	}
	return user, sys
}

// cpuMeter adds up the CPU time of this process over the intervals
// between start and stop.
type cpuMeter struct {
	user, sys   time.Duration // accumulated
	user0, sys0 time.Duration // at the last start
}

func (c *cpuMeter) start(b *testing.B) { c.user0, c.sys0 = cpuTime(b) }

func (c *cpuMeter) stop(b *testing.B) {
	u, s := cpuTime(b)
	c.user += u - c.user0
	c.sys += s - c.sys0
}

// report reports the CPU seconds per GiB of bytes moved: cpu-s/GiB
// (user and system), usr-s/GiB and sys-s/GiB.
func (c *cpuMeter) report(b *testing.B, bytes int64) {
	gib := float64(bytes) / (1 << 30)
	if gib <= 0 {
		return
	}
	b.ReportMetric((c.user+c.sys).Seconds()/gib, "cpu-s/GiB")
	b.ReportMetric(c.user.Seconds()/gib, "usr-s/GiB")
	b.ReportMetric(c.sys.Seconds()/gib, "sys-s/GiB")
}

// BenchmarkFUSESeqWrite writes a 1 GiB file per iteration in 1 MiB writes
// and fsyncs it, through each mount, each over a fresh tmpfs (see the top
// of this file).
func BenchmarkFUSESeqWrite(b *testing.B) {
	forEachMount(b, seqMounts, seqBefore(b), func(b *testing.B, m benchMount) {
		checkFS(b, m, *benchSeqFS)
		size := seqSize(b)
		buf := randBytes(MaxWrite, 1)
		path := filepath.Join(m.mnt, "seq-write")
		b.SetBytes(size)
		var cpu cpuMeter
		var moved int64
		for b.Loop() {
			cpu.start(b)
			writeSeq(b, path, buf, size)
			cpu.stop(b)
			moved += size
			b.StopTimer()
			if err := os.Remove(path); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		cpu.report(b, moved)
	})
}

// BenchmarkFUSESeqRead reads a 1 GiB file per iteration in 1 MiB reads
// through each mount, each over a fresh tmpfs, with the mount's page cache
// of the file dropped before each pass (see the top of this file).
func BenchmarkFUSESeqRead(b *testing.B) {
	forEachMount(b, seqReadMounts, seqBefore(b), func(b *testing.B, m benchMount) {
		checkFS(b, m, *benchSeqFS)
		size := seqSize(b)
		// Written straight into the backing directory (not through
		// the mount) and fsynced, so that it stays in the page cache
		// there, clean: no writeback during the reads.
		writeSeq(b, filepath.Join(m.backing, "seq-read"), randBytes(MaxWrite, 2), size)
		path := filepath.Join(m.mnt, "seq-read")
		buf := make([]byte, MaxWrite)
		b.SetBytes(size)
		var cpu cpuMeter
		var moved int64
		for b.Loop() {
			b.StopTimer()
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				f.Close()
				b.Fatal("fadvise DONTNEED:", err)
			}
			b.StartTimer()
			cpu.start(b)
			var total int64
			for {
				k, err := f.Read(buf)
				total += int64(k)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					f.Close()
					b.Fatalf("read at %d: %v", total, err)
				}
			}
			f.Close()
			cpu.stop(b)
			moved += total
			if total != size {
				b.Fatalf("read %d bytes, want %d", total, size)
			}
		}
		cpu.report(b, moved)
	})
}

// BenchmarkFUSEMetadata creates, stats and unlinks 10,000 files per
// iteration through each mount, each over a fresh tmpfs (see the top of
// this file); the result is per file.
func BenchmarkFUSEMetadata(b *testing.B) {
	var before func(b *testing.B)
	switch *benchMetaFS {
	case "tmpfs":
		before = func(b *testing.B) { freshTmpfs(b, 4<<30) }
	case "disk":
	default:
		b.Fatalf("-fusebench.metafs=%q: want tmpfs or disk", *benchMetaFS)
	}
	forEachMount(b, benchMounts, before, func(b *testing.B, m benchMount) {
		checkFS(b, m, *benchMetaFS)
		n := *benchFiles
		if n <= 0 {
			b.Fatalf("-fusebench.files=%d: want a positive number", n)
		}
		dir := filepath.Join(m.mnt, "meta")
		paths := make([]string, n)
		for j := range paths {
			paths[j] = filepath.Join(dir, fmt.Sprintf("file-%06d", j))
		}
		var create, stat, unlink time.Duration
		for b.Loop() {
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			for _, p := range paths {
				f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
			t1 := time.Now()
			for _, p := range paths {
				if st, err := os.Stat(p); err != nil || st.Size() != 0 {
					b.Fatalf("stat %s: %v, %v", p, st, err)
				}
			}
			t2 := time.Now()
			for _, p := range paths {
				if err := os.Remove(p); err != nil {
					b.Fatal(err)
				}
			}
			t3 := time.Now()
			if err := os.Remove(dir); err != nil {
				b.Fatal(err)
			}
			create, stat, unlink = create+t1.Sub(t0), stat+t2.Sub(t1), unlink+t3.Sub(t2)
		}
		files := float64(b.N) * float64(n)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/files, "ns/file")
		b.ReportMetric(files/b.Elapsed().Seconds(), "files/s")
		b.ReportMetric(float64(create.Nanoseconds())/files, "create-ns/file")
		b.ReportMetric(float64(stat.Nanoseconds())/files, "stat-ns/file")
		b.ReportMetric(float64(unlink.Nanoseconds())/files, "unlink-ns/file")
	})
}

// checkFS fails b unless m's backing directory is on a tmpfs when where
// (-fusebench.seqfs or -fusebench.metafs) says tmpfs.
func checkFS(b *testing.B, m benchMount, where string) {
	if where != "tmpfs" {
		return
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.backing, &st); err != nil {
		b.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		b.Fatalf("backing directory %s is on a file system of type %#x, want tmpfs", m.backing, st.Type)
	}
}

// freshTmpfs mounts a new tmpfs (size bytes at most) on a temp directory and
// points TMPDIR at it for the rest of b, so that the temp directories b
// makes after (backing directories, mount points) are on it. It is
// unmounted at the end of b, after the mounts made on it (cleanups run
// last-registered first).
func freshTmpfs(b *testing.B, size int64) {
	dir, err := os.MkdirTemp("", "fusebench-tmpfs-")
	if err != nil {
		b.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		os.Remove(dir)
		b.Fatal("mount tmpfs:", err)
	}
	b.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			b.Errorf("unmount tmpfs %s: %v (detaching it)", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
		os.Remove(dir)
	})
	b.Setenv("TMPDIR", dir)
}
