package rpcrdma

import (
	"bytes"
	"errors"
	"testing"
)

func TestPrivateDataWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    PrivateData
		wire []byte
	}{
		{"our default", defaultPrivateData(), []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3}},
		{"Linux client, remote invalidation", PrivateData{RemoteInvalidate: true, SendSize: 4096, RecvSize: 4096}, []byte{0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3}},
		{"smallest and largest", PrivateData{SendSize: 1024, RecvSize: 256 * 1024}, []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0, 0, 255}},
	} {
		got, err := tc.p.Append(nil)
		if err != nil || !bytes.Equal(got, tc.wire) {
			t.Errorf("%s: Append = %x, %v, want %x", tc.name, got, err, tc.wire)
		}
		p, ok := parsePrivateData(tc.wire)
		if !ok || p != tc.p {
			t.Errorf("%s: Parse = %+v, %v", tc.name, p, ok)
		}
	}
}

func TestParsePrivateData(t *testing.T) {
	absent := absentPrivateData()
	good := []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0, 7, 15}
	ib := append(bytes.Clone(good), make([]byte, 48)...) // InfiniBand CM pads to 56 bytes
	for _, tc := range []struct {
		name string
		b    []byte
		want PrivateData
		ok   bool
	}{
		{"none", nil, absent, false},
		{"7 bytes", good[:7], absent, false},
		{"wrong magic", []byte{0x18, 0x0e, 0xab, 0xf6, 1, 0, 7, 15}, absent, false},
		{"version 2", []byte{0xf6, 0xab, 0x0e, 0x18, 2, 0, 7, 15}, absent, false},
		{"version 0", []byte{0xf6, 0xab, 0x0e, 0x18, 0, 0, 7, 15}, absent, false},
		{"sizes 8 KiB and 16 KiB", good, PrivateData{SendSize: 8192, RecvSize: 16384}, true},
		{"trailing bytes ignored", ib, PrivateData{SendSize: 8192, RecvSize: 16384}, true},
		{"reserved flag bits ignored", []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0xfe, 0, 0}, PrivateData{SendSize: 1024, RecvSize: 1024}, true},
		{"all flag bits", []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0xff, 0, 0}, PrivateData{RemoteInvalidate: true, SendSize: 1024, RecvSize: 1024}, true},
	} {
		p, ok := parsePrivateData(tc.b)
		if p != tc.want || ok != tc.ok {
			t.Errorf("%s: = %+v, %v; want %+v, %v", tc.name, p, ok, tc.want, tc.ok)
		}
	}
}

func TestPrivateDataAppend(t *testing.T) {
	got, err := PrivateData{SendSize: 5000, RecvSize: 2047}.Append(nil)
	if err != nil || got[6] != 3 || got[7] != 0 {
		t.Errorf("rounding down: %x, %v", got, err)
	}
	for _, p := range []PrivateData{{SendSize: 1023, RecvSize: 4096}, {SendSize: 4096, RecvSize: 256*1024 + 1024}, {}} {
		if b, err := p.Append([]byte{9}); !errors.Is(err, ErrInvalid) || len(b) != 1 {
			t.Errorf("Append(%+v) = %x, %v; want ErrInvalid", p, b, err)
		}
	}
}

func TestNegotiateInline(t *testing.T) {
	for _, tc := range []struct {
		local, peer PrivateData
		send, recv  int
	}{
		{defaultPrivateData(), absentPrivateData(), 1024, 1024},
		{defaultPrivateData(), defaultPrivateData(), 4096, 4096},
		{defaultPrivateData(), PrivateData{SendSize: 8192, RecvSize: 2048}, 2048, 4096},
		{PrivateData{SendSize: 65536, RecvSize: 65536}, PrivateData{SendSize: 16384, RecvSize: 32768}, 32768, 16384},
	} {
		send, recv := negotiateInline(tc.local, tc.peer)
		if send != tc.send || recv != tc.recv {
			t.Errorf("negotiateInline(%+v, %+v) = %d, %d; want %d, %d", tc.local, tc.peer, send, recv, tc.send, tc.recv)
		}
	}
}

func FuzzParsePrivateData(f *testing.F) {
	f.Add([]byte{0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3})
	f.Add([]byte{0xf6, 0xab, 0x0e, 0x18, 1, 1, 0, 255, 0, 0, 0, 0})
	f.Add([]byte{0xf6, 0xab, 0x0e, 0x18, 2, 0, 3, 3})
	f.Add([]byte{0xf6, 0xab, 0x0e})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := parsePrivateData(b)
		if p.SendSize < MinInlineSize || p.SendSize > MaxInlineSize || p.RecvSize < MinInlineSize || p.RecvSize > MaxInlineSize {
			t.Fatalf("sizes out of range: %+v", p)
		}
		if !ok {
			if p != absentPrivateData() {
				t.Fatalf("not ok but %+v", p)
			}
			return
		}
		enc, err := p.Append(nil)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(enc[:5], b[:5]) || !bytes.Equal(enc[6:], b[6:8]) || enc[5] != b[5]&1 {
			t.Fatalf("re-encode %x of %x", enc, b[:8])
		}
		if q, ok := parsePrivateData(enc); !ok || q != p {
			t.Fatalf("round trip %+v -> %+v", p, q)
		}
	})
}
