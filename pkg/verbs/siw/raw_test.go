package siw

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// rawPeer is a hand-driven MPA client for feeding malformed traffic to our
// passive side: it does the handshake, then sends whatever bytes a test
// builds.
type rawPeer struct {
	c   net.Conn
	br  *bufio.Reader
	crc bool
}

// dialRaw connects to a listener of ours; rtr sends the RTR after the reply.
func dialRaw(t testing.TB, addr string, crc, rtr bool, ird, ord uint16) *rawPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := mpaFrame{rev: 2, enhanced: true, crc: crc, p2p: true, rtrWrite: true, ird: ird, ord: ord}
	b, _ := req.encode(nil)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{c: c, br: bufio.NewReader(c)}
	var rep mpaFrame
	if err := readMPAFrame(p.br, true, &rep); err != nil {
		t.Fatal("MPA reply:", err)
	}
	p.crc = rep.crc
	if rtr {
		p.send(p.tagged(opRDMAWrite, true, 1, 0, nil))
	}
	return p
}

// fpdu frames a ULPDU (DDP/RDMAP header without the MPA length, payload).
func (p *rawPeer) fpdu(hdr, payload []byte) []byte {
	n := len(hdr) + len(payload)
	b := binary.BigEndian.AppendUint16(nil, uint16(n))
	b = append(b, hdr...)
	b = append(b, payload...)
	b = append(b, make([]byte, padLen(n))...)
	var crc uint32
	if p.crc {
		crc = crc32.Checksum(b, castagnoli)
	}
	return binary.LittleEndian.AppendUint32(b, crc)
}

func (p *rawPeer) tagged(op byte, last bool, stag uint32, to uint64, payload []byte) []byte {
	var h [2 + taggedHdrLen]byte
	putTagged(h[:], 0, last, op, stag, to)
	return p.fpdu(h[2:], payload)
}

func (p *rawPeer) untagged(op byte, last bool, inv, qn, msn, mo uint32, payload []byte) []byte {
	var h [2 + untaggedHdrLen]byte
	putUntagged(h[:], 0, last, op, inv, qn, msn, mo)
	return p.fpdu(h[2:], payload)
}

func (p *rawPeer) send(b []byte) {
	_, _ = p.c.Write(b)
}

// readTerminate reads FPDUs until a Terminate and returns its control word.
func (p *rawPeer) readTerminate(t testing.TB) termCtrl {
	t.Helper()
	for {
		var l [2]byte
		if _, err := io.ReadFull(p.br, l[:]); err != nil {
			t.Fatalf("no Terminate before the connection ended: %v", err)
		}
		n := int(binary.BigEndian.Uint16(l[:]))
		body := make([]byte, n+padLen(n)+mpaCRCLen)
		if _, err := io.ReadFull(p.br, body); err != nil {
			t.Fatal(err)
		}
		if p.crc {
			want := crc32.Checksum(append(l[:], body[:n+padLen(n)]...), castagnoli)
			if got := binary.LittleEndian.Uint32(body[n+padLen(n):]); got != want {
				t.Fatalf("bad CRC on an FPDU from us: 0x%08x != 0x%08x", got, want)
			}
		}
		if body[0]&ddpTagged == 0 && body[1]&rdmapOpMask == opTerminate {
			return parseTermCtrl(body[untaggedHdrLen:])
		}
	}
}

// rawServer starts our passive side with an MR (all access) and n posted
// 256-byte receives, accepting one raw client.
func rawServer(t testing.TB, cfg Config, n int) (s *end, mr verbs.MR, addr string, accepted chan error) {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	s = newEnd(t, cfg, verbs.QPAttr{})
	mr = regMR(t, s, 4096, allAccess)
	rb := regMR(t, s, 256*max(n, 1), verbs.AccessLocalWrite)
	for i := 0; i < n; i++ {
		if err := s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rb.SGE(256*i, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := s.dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			_, err = req.Accept(ctx, s.qp, verbs.ConnParam{ResponderResources: 2, InitiatorDepth: 2})
		}
		accepted <- err
	}()
	return s, mr, ln.Addr().String(), accepted
}

func crc32Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
