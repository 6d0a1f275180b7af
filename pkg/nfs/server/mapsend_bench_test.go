package server

import (
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// BenchmarkSendFromFile compares, over loopback TCP from a file on tmpfs
// (/dev/shm), 1 MiB sends of a pread copy against sends straight from a
// mapping of the file kept mapped. It reports the process's CPU seconds
// (user+system, rusage; sender and receiver are both in it) per GiB sent.
func BenchmarkSendFromFile(b *testing.B) {
	const chunk, size = 1 << 20, 64 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := testenv.TmpfsFile(b, data)
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(m)
	for _, mode := range []string{"pread", "mmap"} {
		b.Run(mode, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := l.Accept()
				if err != nil {
					return
				}
				io.Copy(io.Discard, c)
				c.Close()
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, chunk)
			hdr := make([]byte, 128)
			b.SetBytes(chunk)
			cpu0 := testenv.CPUTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := int64(i%(size/chunk)) * chunk
				var p []byte
				if mode == "pread" {
					if _, err := unix.Pread(int(f.Fd()), buf, off); err != nil {
						b.Fatal(err)
					}
					p = buf
				} else {
					p = m[off : off+chunk]
				}
				bufs := net.Buffers{hdr, p}
				if _, err := bufs.WriteTo(c); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			<-done
			b.StopTimer()
			testenv.ReportCPUPerGiB(b, cpu0, float64(b.N)*chunk)
		})
	}
}
