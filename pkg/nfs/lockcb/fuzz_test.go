package lockcb

import (
	"reflect"
	"testing"
)

// FuzzDecode: any packet decodes or fails with ErrBadMessage, never
// panics; what decodes is within the limits and encodes back to as many
// bytes (pad bytes aside) that decode to the same message.
func FuzzDecode(f *testing.F) {
	for _, m := range []Message{
		{Kind: KindHello, Tag: "4242", Servers: []string{"10.0.0.5", "server.example"}},
		{Kind: KindHello},
		{Kind: KindCall, ID: 7, Prog: 100021, Proc: 5, Peer: "127.0.0.1:801", Args: []byte{0, 0, 0, 1, 2, 3, 4, 5}},
		{Kind: KindReply, ID: 7, Stat: 1},
	} {
		f.Add(m.Marshal())
	}
	f.Add([]byte{0, 0, 0, 9})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if err := m.Check(); err != nil {
			t.Fatalf("decoded %+v fails Check: %v", m, err)
		}
		out := m.Marshal()
		if len(out) != len(b) {
			t.Fatalf("re-encoded to %d bytes, decoded from %d", len(out), len(b))
		}
		m2, err := Decode(out)
		if err != nil || !reflect.DeepEqual(m2, m) {
			t.Fatalf("re-decoded %+v, %v; want %+v", m2, err, m)
		}
	})
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Kind: KindHello, Tag: "1", Servers: []string{"a", "bb", "ccc"}},
		{Kind: KindCall, ID: 1 << 31, Prog: 100024, Proc: 6, Peer: "[::1]:2049", Args: []byte("abcde")},
		{Kind: KindReply, ID: 3, Stat: 2},
	} {
		got, err := Decode(m.Marshal())
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("Decode(Marshal(%+v)) = %+v, %v", m, got, err)
		}
	}
	for _, bad := range []Message{
		{Kind: KindHello, Tag: string(make([]byte, MaxTag+1))},
		{Kind: KindHello, Servers: make([]string, MaxServers+1)},
		{Kind: KindCall, Args: make([]byte, MaxArgs+1)},
		{Kind: 9},
	} {
		if bad.Check() == nil {
			t.Errorf("Check(%+v) = nil", bad.Kind)
		}
		if _, err := Decode(bad.Marshal()); err == nil {
			t.Errorf("Decode of an over-limit %v message succeeded", bad.Kind)
		}
	}
}
