package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/wakeups"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// wakeupFiles is the files of one iteration of BenchmarkFUSEWakeups, and
// of its traced pass.
const wakeupFiles = 1000

// BenchmarkFUSEWakeups counts what one file's create+stat+unlink costs the
// scheduler, through go-fuse's loopback and our mount over RDMA and TCP
// (each over a fresh tmpfs, as BenchmarkFUSEMetadata): one iteration
// creates 1,000 files in a new directory (open O_CREAT|O_EXCL, close),
// stats each, unlinks each, and removes the directory. Everything on the
// path but the kernel runs in this process (the FUSE server, and for ours
// the NFS client and the export server). Per file: the context switches
// of this process (ctxsw/file, and per phase create-, stat- and
// unlink-ctxsw/file), of the kernel's threads and of the machine
// (wakeups.Meter); then one iteration more under the Go execution tracer:
// the goroutine wake-ups and hand-offs (wakeups.Trace; -test.v or
// -wakeups.sites logs them by site).
func BenchmarkFUSEWakeups(b *testing.B) {
	mounts := []namedMount{
		benchMounts[0], // loopback
		{"rdma", func(b *testing.B) benchMount { return mountOurs(b, mountopts.ProtoRDMA, false) }},
		{"tcp", func(b *testing.B) benchMount { return mountOurs(b, mountopts.ProtoTCP, false) }},
	}
	forEachMount(b, mounts, func(b *testing.B) { freshTmpfs(b, 1<<30) }, func(b *testing.B, m benchMount) {
		checkFS(b, m, "tmpfs")
		dir := filepath.Join(m.mnt, "meta")
		paths := make([]string, wakeupFiles)
		for j := range paths {
			paths[j] = filepath.Join(dir, fmt.Sprintf("file-%06d", j))
		}
		var phase [3]int64 // create, stat, unlink: process context switches
		mark := func(i int, from int64) int64 {
			c, err := wakeups.ReadProcess()
			if err != nil {
				b.Fatal(err)
			}
			if i >= 0 {
				phase[i] += c.Process() - from
			}
			return c.Process()
		}
		batch := func(count bool) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			at := mark(-1, 0)
			for _, p := range paths {
				f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
			if count {
				at = mark(0, at)
			}
			for _, p := range paths {
				if st, err := os.Stat(p); err != nil || st.Size() != 0 {
					b.Fatalf("stat %s: %v, %v", p, st, err)
				}
			}
			if count {
				at = mark(1, at)
			}
			for _, p := range paths {
				if err := os.Remove(p); err != nil {
					b.Fatal(err)
				}
			}
			if count {
				mark(2, at)
			}
			if err := os.Remove(dir); err != nil {
				b.Fatal(err)
			}
		}
		var m0 wakeups.Meter
		m0.Start(b)
		for b.Loop() {
			batch(true)
		}
		m0.Stop(b)
		files := float64(b.N) * wakeupFiles
		b.ReportMetric(files/b.Elapsed().Seconds(), "files/s")
		m0.Report(b, files, "file")
		for i, name := range []string{"create", "stat", "unlink"} {
			b.ReportMetric(float64(phase[i])/files, name+"-ctxsw/file")
		}
		wakeups.TracePass(b, wakeupFiles, "file", func() { batch(false) })
	})
}
