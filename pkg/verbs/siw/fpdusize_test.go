package siw

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestULPDUFollowsMSS: with no Config.MaxULPDU our FPDUs follow the
// connection's MSS as TCP reports it while the connection runs, as Linux
// siw sizes each FPDU by tcp_sock.mss_cache (siw_update_tcpseg), and not
// only the MSS of the connection's first moments, which TCP bounds to
// half the peer's first window (on loopback 32741 bytes against 65483
// later). With MaxULPDU set they keep that size. A raw peer reads the
// FPDUs of sixteen 1 MiB RDMA Writes and checks each CRC.
func TestULPDUFollowsMSS(t *testing.T) {
	const msgs, size = 16, 1 << 20
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"path MSS", Config{}},
		{"MaxULPDU 1000", Config{MaxULPDU: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, addr, accepted := rawServer(t, tc.cfg, 0)
			p := dialRaw(t, addr, true, true, 2, 2)
			if err := <-accepted; err != nil {
				t.Fatal(err)
			}
			// largest ULPDU of each message, or the reader's error
			largest := make(chan int, msgs)
			readErr := make(chan error, 1)
			go func() { readErr <- readWrites(p, msgs, largest) }()

			local := regMR(t, s, size, verbs.AccessLocalWrite)
			got := make([]int, 0, msgs)
			for i := range msgs {
				if err := s.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{local.SGE(0, size)}, RKey: 0x1234, RemoteAddr: 0}); err != nil {
					t.Fatal(err)
				}
				wantOK(t, waitWC(t, s.scq), verbs.WCRDMAWrite)
				select {
				case n := <-largest:
					got = append(got, n)
				case err := <-readErr:
					t.Fatalf("raw peer, message %d: %v", i, err)
				}
			}
			want := tc.cfg.MaxULPDU
			if want == 0 {
				rc, err := s.qp.(*qp).conn.SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				var mss int
				if err := rc.Control(func(fd uintptr) {
					mss, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
				}); err != nil || mss <= 0 {
					t.Fatalf("TCP_MAXSEG: %d, %v", mss, err)
				}
				want = mulpdu(mss, false)
			}
			t.Logf("largest ULPDU per message: %v; want %d at the end", got, want)
			for i, n := range got {
				if n > want || n > maxULPDU {
					t.Errorf("message %d: a ULPDU of %d bytes, above %d", i, n, want)
				}
			}
			if last := got[len(got)-1]; last != want {
				t.Errorf("last message's FPDUs carry ULPDUs of %d bytes, want %d: the FPDU size did not follow the MSS", last, want)
			}
		})
	}
}

// readWrites reads the FPDUs of msgs tagged messages from p, checking each
// CRC, and sends the largest ULPDU of each message on largest.
func readWrites(p *rawPeer, msgs int, largest chan<- int) error {
	big := 0
	for msgs > 0 {
		var l [2]byte
		if _, err := io.ReadFull(p.br, l[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(l[:]))
		body := make([]byte, n+padLen(n)+mpaCRCLen)
		if _, err := io.ReadFull(p.br, body); err != nil {
			return err
		}
		want := crc32.Checksum(append(l[:], body[:n+padLen(n)]...), castagnoli)
		if got := binary.LittleEndian.Uint32(body[n+padLen(n):]); got != want {
			return fmt.Errorf("bad CRC 0x%08x, want 0x%08x", got, want)
		}
		if body[0]&ddpTagged == 0 {
			return fmt.Errorf("an untagged FPDU (control 0x%02x%02x)", body[0], body[1])
		}
		big = max(big, n)
		if body[0]&ddpLast != 0 {
			largest <- big
			big, msgs = 0, msgs-1
		}
	}
	return nil
}
