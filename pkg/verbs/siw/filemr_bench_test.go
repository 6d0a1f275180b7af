package siw

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// BenchmarkWriteFromFile: 1 MiB RDMA Writes (CRC on) of a 64 MiB file on
// tmpfs (/dev/shm), one at a time: "pread" preads each MiB into a
// registered buffer and writes from it; "mapping" writes straight from a
// region over the file's mapping (verbs.RegFileMR), registered once. It
// reports the process's CPU seconds (user+system, rusage; both ends of the
// connection are in it) per GiB written.
func BenchmarkWriteFromFile(b *testing.B) {
	const chunk, size = 1 << 20, 64 << 20
	data := make([]byte, size)
	fill(data, 3)
	f := testenv.TmpfsFile(b, data)
	for _, mode := range []string{"pread", "mapping"} {
		b.Run(mode, func(b *testing.B) {
			c, s := pair(b, Config{}, Config{}, verbs.QPAttr{}, nil)
			remote := regMR(b, s, chunk, verbs.AccessRemoteWrite)
			buf := regMR(b, c, chunk, 0)
			fmr, err := verbs.RegFileMR(c.pd, f, 0, size, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer fmr.Close()
			b.SetBytes(chunk)
			cpu0 := testenv.CPUTime(b)
			n := 0
			for b.Loop() {
				off := (n % (size / chunk)) * chunk
				sge := fmr.SGE(off, chunk)
				if mode == "pread" {
					if _, err := unix.Pread(int(f.Fd()), buf.Bytes(), int64(off)); err != nil {
						b.Fatal(err)
					}
					sge = buf.SGE(0, chunk)
				}
				if err := c.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{sge}, RKey: remote.RKey(), RemoteAddr: remote.Addr()}); err != nil {
					b.Fatal(err)
				}
				wantOK(b, waitWC(b, c.scq), verbs.WCRDMAWrite)
				n++
			}
			testenv.ReportCPUPerGiB(b, cpu0, float64(n)*chunk)
		})
	}
}
