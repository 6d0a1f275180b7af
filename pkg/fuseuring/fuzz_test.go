package fuseuring

import (
	"encoding/binary"
	"testing"
)

// FuzzParseEntry feeds ring entry headers to parseEntry: it never panics,
// and what it accepts lies within the entry's buffers.
func FuzzParseEntry(f *testing.F) {
	ok := make([]byte, headerSize)
	binary.LittleEndian.PutUint32(ok[0:], inHeaderSize+16+5) // WRITE-like: 16-byte argument, 5-byte payload
	binary.LittleEndian.PutUint32(ok[4:], 16)
	binary.LittleEndian.PutUint64(ok[8:], 7)
	binary.LittleEndian.PutUint64(ok[entInOutOff+8:], 7)
	binary.LittleEndian.PutUint32(ok[entInOutOff+16:], 5)
	f.Add(ok, 8192)
	f.Add(ok[:100], 8192)
	f.Add(make([]byte, headerSize), 0)
	f.Fuzz(func(t *testing.T, hdr []byte, payloadCap int) {
		r, err := parseEntry(hdr, payloadCap)
		if err != nil {
			return
		}
		if r.opLen < 0 || r.opLen > opInSize || r.payloadLen < 0 || r.payloadLen > payloadCap {
			t.Fatalf("accepted %+v with a %d-byte payload buffer", r, payloadCap)
		}
	})
}

func TestParseEntry(t *testing.T) {
	hdr := make([]byte, headerSize)
	le := binary.LittleEndian
	le.PutUint32(hdr[0:], inHeaderSize+40+100)
	le.PutUint32(hdr[4:], 16)
	le.PutUint64(hdr[8:], 99)
	le.PutUint64(hdr[entInOutOff+8:], 99)
	le.PutUint32(hdr[entInOutOff+16:], 100)
	r, err := parseEntry(hdr, 4096)
	if err != nil || r.opLen != 40 || r.payloadLen != 100 || r.commitID != 99 || r.opcode != 16 || r.unique != 99 {
		t.Fatalf("parseEntry: %+v %v", r, err)
	}
	for name, mut := range map[string]func([]byte){
		"payload over buffer":  func(b []byte) { le.PutUint32(b[entInOutOff+16:], 5000) },
		"argument over op_in":  func(b []byte) { le.PutUint32(b[0:], inHeaderSize+129+100) },
		"length below header":  func(b []byte) { le.PutUint32(b[0:], 10) },
		"length below payload": func(b []byte) { le.PutUint32(b[0:], inHeaderSize+50) },
	} {
		b := append([]byte(nil), hdr...)
		mut(b)
		if _, err := parseEntry(b, 4096); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parseEntry(hdr[:headerSize-1], 4096); err == nil {
		t.Error("short header accepted")
	}
}
