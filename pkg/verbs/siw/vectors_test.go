package siw

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// txOnly returns a QP whose transmit path writes into a buffer: DDP
// segmentation and MPA framing without a socket.
func txOnly(crc, markers bool) (*qp, *bytes.Buffer) {
	var out bytes.Buffer
	q := &qp{crcOn: crc, txMark: markers, ulpdu: maxULPDU, maxSGE: 4, done: make(chan struct{})}
	q.tx.fw = newFPDUWriter(&out, crc, markers, 4)
	q.tx.ulpdu = maxULPDU // fixed: no q.tx.rc
	return q, &out
}

// writeSend frames one untagged Send of payload as a single FPDU.
func writeSend(t *testing.T, w *fpduWriter, msn uint32, payload []byte) {
	t.Helper()
	h := w.header(untaggedHdrLen)
	putUntagged(h, untaggedHdrLen+len(payload), true, opSend, 0, qnSend, msn, 0)
	w.begin(h)
	w.payload(payload)
	if err := w.end(); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
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
	zeros := make([]byte, 464)
	var out bytes.Buffer
	w := newFPDUWriter(&out, true, true, 1)
	writeSend(t, w, 1, zeros)
	writeSend(t, w, 2, zeros[:24])
	got := out.Bytes()
	if len(got) != 0x220 {
		t.Fatalf("stream of %d bytes, want 0x220", len(got))
	}
	fig6 := unhex(`002a 4143 00000000 00000000 00000002 00000000 0000 0014` +
		strings.Repeat("00", 24) + `84925898`)
	if !bytes.Equal(got[0x1ec:], fig6) {
		t.Fatalf("Figure 6 FPDU:\n got % x\nwant % x", got[0x1ec:], fig6)
	}
	if !bytes.Equal(got[:6], unhex("00000000 01e2")) {
		t.Fatalf("stream start % x, want a zero marker then ULPDU length 0x1e2", got[:6])
	}

	out.Reset()
	writeSend(t, newFPDUWriter(&out, true, true, 1), 1, zeros[:24])
	fig5 := unhex(`0000 0000 002a 4143 00000000 00000000 00000001 00000000` + strings.Repeat("00", 24) + `52239983`)
	if !bytes.Equal(out.Bytes(), fig5) {
		t.Fatalf("Figure 5 FPDU:\n got % x\nwant % x", out.Bytes(), fig5)
	}
}

// TestFPDUWireBytes: the exact bytes of a last-segment Send as Linux siw
// expects them (DDP 0x41, RDMAP 0x43, little-endian CRC32c), and of the RTR.
func TestFPDUWireBytes(t *testing.T) {
	q, out := txOnly(true, false)
	q.txMu.Lock()
	_ = q.sendMessage(true, opRDMAWrite, 1, 0, 0, 0, 0, nil, 0, true)
	_ = q.sendMessage(false, opSend, 0, 0, 0, qnSend, 1, [][]byte{[]byte("hi")}, 2, true)
	q.txMu.Unlock()
	got := out.Bytes()
	if len(got) != 20+28 {
		t.Fatalf("%d bytes written, want %d", len(got), 20+28)
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
