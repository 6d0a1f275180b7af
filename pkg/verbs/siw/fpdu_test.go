package siw

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// memSource is a streamSource over bytes in memory.
type memSource struct{ r *bytes.Reader }

func (m memSource) readFull(p []byte) error { _, err := io.ReadFull(m.r, p); return err }
func (m memSource) buffered() int           { return m.r.Len() }

// readFPDU reads one FPDU's ULPDU (length field excluded) with r.
func readFPDU(r *fpduReader) ([]byte, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	var l [mpaHdrLen]byte
	if err := r.read(l[:], true); err != nil {
		return nil, err
	}
	ulpdu := make([]byte, binary.BigEndian.Uint16(l[:]))
	if err := r.read(ulpdu, true); err != nil {
		return nil, err
	}
	return ulpdu, r.end(len(ulpdu))
}

// frame writes ulpdus as FPDUs, each ULPDU's first 2 octets of payload
// given in pieces to exercise the gather path.
func frame(t *testing.T, crc, markers bool, ulpdus [][]byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := newFPDUWriter(&out, crc, markers, 3)
	for _, u := range ulpdus {
		h := w.header(0)
		binary.BigEndian.PutUint16(h, uint16(len(u)))
		w.begin(h)
		third := len(u) / 3
		w.payload(u[:third])
		w.payload(u[third : 2*third])
		w.payload(u[2*third:])
		if err := w.end(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestFPDURoundTrip: what the writer frames, the reader takes back apart,
// with CRC32c and markers on and off, over more FPDUs than one batch and
// ULPDU sizes around the marker interval; markers land every 512 octets.
func TestFPDURoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ulpdus [][]byte
	for i := range 3 * batchFPDUs {
		u := make([]byte, []int{1, 2, 3, 4, 509, 510, 511, 512, 513, 1500, 4000}[i%11]+rng.IntN(3))
		for j := range u {
			u[j] = byte(rng.Uint32())
		}
		ulpdus = append(ulpdus, u)
	}
	for _, tc := range []struct{ crc, markers bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		stream := frame(t, tc.crc, tc.markers, ulpdus)
		if tc.markers {
			for off := 0; off < len(stream); off += mpaMarkerIntv {
				if stream[off] != 0 || stream[off+1] != 0 {
					t.Fatalf("crc=%v: marker at %d has reserved bits % x", tc.crc, off, stream[off:off+2])
				}
			}
		}
		r := &fpduReader{src: memSource{bytes.NewReader(stream)}, crcOn: tc.crc, markers: tc.markers}
		for i, want := range ulpdus {
			got, err := readFPDU(r)
			if err != nil {
				t.Fatalf("crc=%v markers=%v FPDU %d: %v", tc.crc, tc.markers, i, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("crc=%v markers=%v FPDU %d: ULPDU differs", tc.crc, tc.markers, i)
			}
		}
		if _, err := readFPDU(r); !errors.Is(err, io.EOF) {
			t.Fatalf("crc=%v markers=%v: after the last FPDU: %v, want io.EOF", tc.crc, tc.markers, err)
		}
	}
}

// TestFPDUReaderErrors: a flipped bit anywhere in an FPDU fails its CRC
// check (naming both values); a marker that does not point at its FPDU's
// start is errMarker; a stream cut inside an FPDU is io.ErrUnexpectedEOF.
func TestFPDUReaderErrors(t *testing.T) {
	ulpdus := [][]byte{bytes.Repeat([]byte{0xab}, 700), []byte("tail")}
	stream := frame(t, true, false, ulpdus)
	first := 2 + 700 + padLen(700) + mpaCRCLen
	for _, at := range []int{0, 1, 2, 350, 701, first - mpaCRCLen, first - 1} {
		bad := bytes.Clone(stream)
		bad[at] ^= 0x10
		r := &fpduReader{src: memSource{bytes.NewReader(bad)}, crcOn: true}
		_, err := readFPDU(r)
		if at < 2 {
			// a changed length field misframes the stream: some error, never success
			if err == nil {
				t.Fatalf("byte %d flipped: no error", at)
			}
			continue
		}
		var ce *crcError
		if !errors.As(err, &ce) || ce.got == ce.computed {
			t.Fatalf("byte %d flipped: %v, want a CRC error", at, err)
		}
	}
	// CRC off: the field is not checked
	bad := bytes.Clone(stream)
	bad[first-1] ^= 0xff
	if _, err := readFPDU(&fpduReader{src: memSource{bytes.NewReader(bad)}}); err != nil {
		t.Fatalf("CRC off: %v", err)
	}

	marked := frame(t, true, true, ulpdus)
	bad = bytes.Clone(marked)
	bad[mpaMarkerIntv+3] ^= 4 // the marker inside the first FPDU: FPDUPTR off by 4
	r := &fpduReader{src: memSource{bytes.NewReader(bad)}, crcOn: true, markers: true}
	if _, err := readFPDU(r); !errors.Is(err, errMarker) {
		t.Fatalf("bad marker: %v, want errMarker", err)
	}

	r = &fpduReader{src: memSource{bytes.NewReader(stream[:first-1])}, crcOn: true}
	if _, err := readFPDU(r); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
}
