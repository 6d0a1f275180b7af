package siw

import (
	"bytes"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"testing"
)

// txOnly returns a QP whose transmit path writes to a loopback TCP socket,
// and the other end of that socket.
func txOnly(t *testing.T, crc, markers bool) (*qp, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	q := &qp{conn: c.(*net.TCPConn), crcOn: crc, txMark: markers, ulpdu: maxULPDU, maxSGE: 4, done: make(chan struct{})}
	q.tx.iov = make([][]byte, 0, 64)
	q.tx.ulpdu = maxULPDU // fixed: no q.tx.rc
	return q, s
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

// TestRFC5044Figures reproduces the annotated FPDUs of RFC 5044 section
// 4.4: Figure 5 (the first FPDU of a stream, after a marker) and Figure 6
// (the second FPDU, with a marker inside it), CRC32c included.
func TestRFC5044Figures(t *testing.T) {
	q, peer := txOnly(t, true, true)
	zeros := make([]byte, 464)
	q.txMu.Lock()
	q.tx.msn[qnSend]++
	if err := q.sendMessage(false, opSend, 0, 0, 0, qnSend, 1, [][]byte{zeros}, 464); err != nil {
		t.Fatal(err)
	}
	if err := q.sendMessage(false, opSend, 0, 0, 0, qnSend, 2, [][]byte{zeros[:24]}, 24); err != nil {
		t.Fatal(err)
	}
	q.txMu.Unlock()
	got := make([]byte, 0x220)
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	fig6 := unhex(`002a 4143 00000000 00000000 00000002 00000000 0000 0014` +
		strings.Repeat("00", 24) + `84925898`)
	if !bytes.Equal(got[0x1ec:], fig6) {
		t.Fatalf("Figure 6 FPDU:\n got % x\nwant % x", got[0x1ec:], fig6)
	}
	if !bytes.Equal(got[:6], unhex("00000000 01e2")) {
		t.Fatalf("stream start % x, want a zero marker then ULPDU length 0x1e2", got[:6])
	}

	q2, peer2 := txOnly(t, true, true)
	q2.txMu.Lock()
	if err := q2.sendMessage(false, opSend, 0, 0, 0, qnSend, 1, [][]byte{zeros[:24]}, 24); err != nil {
		t.Fatal(err)
	}
	q2.txMu.Unlock()
	fig5 := unhex(`0000 0000 002a 4143 00000000 00000000 00000001 00000000` + strings.Repeat("00", 24) + `52239983`)
	got = make([]byte, len(fig5))
	if _, err := io.ReadFull(peer2, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fig5) {
		t.Fatalf("Figure 5 FPDU:\n got % x\nwant % x", got, fig5)
	}
}

// TestFPDUWireBytes: the exact bytes of a last-segment Send as Linux siw
// expects them (DDP 0x41, RDMAP 0x43, little-endian CRC32c), and of the RTR.
func TestFPDUWireBytes(t *testing.T) {
	q, peer := txOnly(t, true, false)
	q.txMu.Lock()
	_ = q.sendMessage(true, opRDMAWrite, 1, 0, 0, 0, 0, nil, 0)
	_ = q.sendMessage(false, opSend, 0, 0, 0, qnSend, 1, [][]byte{[]byte("hi")}, 2)
	q.txMu.Unlock()
	got := make([]byte, 20+28)
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	rtr := got[:20]
	if !bytes.Equal(rtr[:16], unhex("000e c140 00000001 0000000000000000")) {
		t.Fatalf("RTR % x", rtr)
	}
	send := got[20:]
	if !bytes.Equal(send[:24], unhex("0014 4143 00000000 00000000 00000001 00000000 6869 0000")) {
		t.Fatalf("Send % x", send)
	}
	crc := castagnoliSum(send[:24])
	if send[24] != byte(crc) || send[27] != byte(crc>>24) {
		t.Fatalf("CRC % x is not little-endian 0x%08x", send[24:], crc)
	}
}
