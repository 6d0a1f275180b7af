package fusefs

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// An MPA request or reply frame starts with a 16-octet key and then a
// flags octet whose C bit asks for CRC32c (RFC 5044 section 7.1).
const (
	mpaFlagsOff = 16
	mpaFlagCRC  = 0x40
)

// mpaFlags records the flags octet of the first MPA frame each way of
// the connections a testenv.Proxy forwards: the client's request and the
// server's reply.
type mpaFlags struct {
	mu       sync.Mutex
	req, rep []byte // one flags octet per connection
}

// pump is a testenv.Pump that keeps the first frame's flags octet.
func (m *mpaFlags) pump(dst io.Writer, src io.Reader, toTarget bool) {
	var head [mpaFlagsOff + 1]byte
	if _, err := io.ReadFull(src, head[:]); err != nil {
		return
	}
	m.mu.Lock()
	if toTarget {
		m.req = append(m.req, head[mpaFlagsOff])
	} else {
		m.rep = append(m.rep, head[mpaFlagsOff])
	}
	m.mu.Unlock()
	if _, err := dst.Write(head[:]); err != nil {
		return
	}
	_, _ = io.Copy(dst, src)
}

func (m *mpaFlags) crcBits() (req, rep []bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.req {
		req = append(req, f&mpaFlagCRC != 0)
	}
	for _, f := range m.rep {
		rep = append(rep, f&mpaFlagCRC != 0)
	}
	return req, rep
}

// TestMountNoMPACRC: nompacrc makes the mount's MPA request leave the CRC
// bit clear, so the connection runs without CRC32c when the server does
// not ask for it either (as Linux siw by default), and with it when the
// server asks (MPA uses CRC when either end asks, RFC 5044 section 7.1);
// by default the mount asks. Files written and read through the mount
// come back whole either way.
func TestMountNoMPACRC(t *testing.T) {
	needFUSE(t)
	for _, tc := range []struct {
		name        string
		opts        string
		serverNoCRC bool
		wantReq     bool // the mount's request asks for CRC
		wantRep     bool // the server's reply: CRC in use
	}{
		{"default", "", true, true, true},
		{"nompacrc", "nompacrc", true, false, false},
		{"nompacrc, server asks", "nompacrc", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServerSIW(t, siw.Config{RTRDelay: -1, NoCRC: tc.serverNoCRC})
			var flags mpaFlags
			p := testenv.NewProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.rdmaPort)), flags.pump)
			extra := "port=" + strconv.Itoa(p.Port())
			if tc.opts != "" {
				extra += "," + tc.opts
			}
			dir, _ := s.mount(t, mountopts.ProtoRDMA, extra)

			want := make([]byte, 3<<20+123) // several 64 KiB FPDUs each way
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			onServer, err := os.ReadFile(filepath.Join(s.root, "f"))
			if err != nil || !bytes.Equal(onServer, want) {
				t.Fatalf("server's copy differs (err %v, %d bytes)", err, len(onServer))
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			// drop the mount's cached pages: the reads go to the server
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(f)
			f.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read back differs (err %v, %d bytes)", err, len(got))
			}

			req, rep := flags.crcBits()
			if len(req) == 0 || len(rep) == 0 {
				t.Fatalf("no MPA exchange went through the proxy (%d requests, %d replies)", len(req), len(rep))
			}
			for i := range req {
				if req[i] != tc.wantReq {
					t.Errorf("connection %d: request asks for CRC %v, want %v", i, req[i], tc.wantReq)
				}
			}
			for i := range rep {
				if rep[i] != tc.wantRep {
					t.Errorf("connection %d: reply CRC %v, want %v", i, rep[i], tc.wantRep)
				}
			}
		})
	}
}
