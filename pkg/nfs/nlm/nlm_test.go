package nlm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

var lk = Lock{
	CallerName: "node-a",
	FH:         bytes.Repeat([]byte{0xfe}, 28),
	OH:         []byte("1234@node-a"),
	Svid:       1234,
	Offset:     1 << 40,
	Length:     0,
}

func samples() []xdrtest.Sample {
	return []xdrtest.Sample{
		{Name: "lock", V: &Lock{CallerName: "h", FH: []byte{1}, OH: []byte{2, 3}, Svid: -1, Offset: ^uint64(0), Length: 7}},
		{Name: "lock/max", V: &Lock{CallerName: strings.Repeat("c", MaxStrLen), FH: make([]byte, MaxNetobjSize), OH: make([]byte, MaxNetobjSize)}},
		{Name: "holder", V: &Holder{Exclusive: true, Svid: 9, OH: []byte("oh"), Offset: 10, Length: 20}},
		{Name: "test args", V: &TestArgs{Cookie: []byte{0, 0, 0, 1}, Exclusive: true, Lock: lk}},
		{Name: "lock args", V: &LockArgs{Cookie: []byte("c"), Block: true, Exclusive: true, Lock: lk, Reclaim: true, State: 3}},
		{Name: "lock args/zero", V: &LockArgs{}},
		{Name: "canc args", V: &CancArgs{Cookie: []byte("cc"), Block: true, Lock: lk}},
		{Name: "unlock args", V: &UnlockArgs{Cookie: []byte("ccc"), Lock: lk}},
		{Name: "share args", V: &ShareArgs{Cookie: []byte{9}, Share: Share{CallerName: "n", FH: []byte{1}, OH: []byte{2}, Mode: DenyWrite, Access: AccessRead}, Reclaim: true}},
		{Name: "notify args", V: &NotifyArgs{Name: "node-b", State: 5}},
		{Name: "sm status", V: &SMStatus{MonName: "node-b", State: 7, Priv: [16]byte{1, 2, 3, 15: 16}}},
		{Name: "test res/granted", V: &TestRes{Cookie: []byte{1}, Stat: Granted}},
		{Name: "test res/denied", V: &TestRes{Cookie: []byte{1}, Stat: Denied, Holder: &Holder{Svid: 4, OH: []byte("x"), Length: 1}}},
		{Name: "test res/grace", V: &TestRes{Stat: DeniedGracePeriod}},
		{Name: "res", V: &Res{Cookie: []byte("cookie"), Stat: Blocked}},
		{Name: "share res", V: &ShareRes{Cookie: []byte{1}, Stat: DeniedNoLocks, Sequence: -2}},
	}
}

func TestRoundTrip(t *testing.T) { xdrtest.RoundTrips(t, samples()) }

// TestDecodeCopies checks that a decoded value does not alias its input.
func TestDecodeCopies(t *testing.T) {
	b := xdrtest.Encode(&LockArgs{Cookie: []byte("ck"), Lock: lk})
	var a LockArgs
	if err := a.Decode(xdr.NewDecoder(b)); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xaa
	}
	if string(a.Cookie) != "ck" || !bytes.Equal(a.Lock.FH, lk.FH) || string(a.Lock.OH) != string(lk.OH) {
		t.Fatalf("decoded value aliases its input: %+v", a)
	}
}

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBytes checks encodings written out by hand from the XDR of X/Open
// XNFS chapter 14.
func TestBytes(t *testing.T) {
	cases := []struct {
		name string
		v    Message
		hex  string
	}{
		{"nlm4_lockargs", &LockArgs{
			Cookie: []byte{0xc0, 0x0c}, Block: true, Exclusive: true,
			Lock:    Lock{CallerName: "cli", FH: []byte{1, 2, 3, 4, 5}, OH: []byte("o"), Svid: 42, Offset: 0x100000000, Length: 0x10},
			Reclaim: false, State: 3,
		}, `
			00000002 c00c0000        cookie
			00000001                 block
			00000001                 exclusive
			00000003 636c6900        caller_name "cli"
			00000005 01020304 05000000  fh
			00000001 6f000000        oh "o"
			0000002a                 svid 42
			00000001 00000000        l_offset 2^32
			00000000 00000010        l_len 16
			00000000                 reclaim
			00000003                 state`},
		{"nlm4_testres denied", &TestRes{Cookie: nil, Stat: Denied, Holder: &Holder{Exclusive: true, Svid: -1, OH: []byte{0xab, 0xcd, 0xef, 0x01}, Offset: 5, Length: 0}}, `
			00000000                 cookie
			00000001                 NLM4_DENIED
			00000001                 exclusive
			ffffffff                 svid -1
			00000004 abcdef01        oh
			00000000 00000005        l_offset
			00000000 00000000        l_len`},
		{"nlm4_testres granted", &TestRes{Cookie: []byte{7}, Stat: Granted, Holder: &Holder{Svid: 1}}, `
			00000001 07000000 00000000`},
		{"nlm4_res", &Res{Cookie: []byte{1, 2, 3, 4}, Stat: DeniedGracePeriod}, `
			00000004 01020304 00000004`},
		{"nlm4_notify", &NotifyArgs{Name: "node", State: 9}, `
			00000004 6e6f6465 00000009`},
		{"status", &SMStatus{MonName: "ab", State: 11, Priv: [16]byte{0: 1, 15: 0xff}}, `
			00000002 61620000 0000000b
			01000000 00000000 00000000 000000ff`},
		{"nlm4_shareargs", &ShareArgs{Cookie: nil, Share: Share{CallerName: "", FH: nil, OH: nil, Mode: DenyReadWrite, Access: AccessReadWrite}, Reclaim: true}, `
			00000000 00000000 00000000 00000000 00000003 00000003 00000001`},
	}
	for _, c := range cases {
		want := hexBytes(t, stripComments(c.hex))
		if got := xdrtest.Encode(c.v); !bytes.Equal(got, want) {
			t.Errorf("%s: encode\n%s\nwant\n%s", c.name, hex.Dump(got), hex.Dump(want))
		}
		got := xdrtest.Fresh(c.v)
		if err := got.Decode(xdr.NewDecoder(want)); err != nil {
			t.Errorf("%s: decode: %v", c.name, err)
		}
		if tr, ok := c.v.(*TestRes); ok && tr.Stat != Denied {
			tr.Holder = nil
		}
		if !reflect.DeepEqual(got, c.v) {
			t.Errorf("%s: decode %+v want %+v", c.name, got, c.v)
		}
	}
}

// stripComments keeps the hex words of each line of a vector, dropping
// the field names after them.
func stripComments(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, f := range strings.Fields(line) {
			if _, err := hex.DecodeString(f); err != nil || len(f)%8 != 0 {
				break
			}
			out = append(out, f)
		}
	}
	return strings.Join(out, "")
}

func TestRejects(t *testing.T) {
	u := xdrtest.Words
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	cases := []struct {
		name string
		v    Message
		in   []byte
		want error
	}{
		{"cookie too long", new(Res), cat(u(MaxNetobjSize+1), make([]byte, 1100)), xdr.ErrTooLong},
		{"caller_name too long", new(TestArgs), cat(u(0, 1, MaxStrLen+1), make([]byte, 1100)), xdr.ErrTooLong},
		{"fh too long", new(UnlockArgs), cat(u(0, 1, 0x61000000, MaxNetobjSize+1), make([]byte, 1100)), xdr.ErrTooLong},
		{"oh too long", new(CancArgs), cat(u(0, 0, 0, 0, 0, 2000), make([]byte, 2100)), xdr.ErrTooLong},
		{"bad block bool", new(LockArgs), u(0, 2, 0), xdr.ErrBadBool},
		{"bad reclaim bool", new(LockArgs), cat(u(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0)), xdr.ErrBadBool},
		{"bad exclusive in holder", new(TestRes), u(0, 1, 5), xdr.ErrBadBool},
		{"huge length", new(NotifyArgs), u(0xffffffff), xdr.ErrTooLong},
		{"mon_name too long", new(SMStatus), cat(u(1025), make([]byte, 1100)), xdr.ErrTooLong},
		{"short priv", new(SMStatus), u(0, 1, 0, 0), xdr.ErrShort},
	}
	for _, c := range cases {
		if err := c.v.Decode(xdr.NewDecoder(c.in)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestStat(t *testing.T) {
	cases := []struct {
		s     Stat
		name  string
		errno syscall.Errno
	}{
		{Denied, "NLM4_DENIED", syscall.EAGAIN},
		{DeniedNoLocks, "NLM4_DENIED_NOLOCKS", syscall.ENOLCK},
		{Blocked, "NLM4_BLOCKED", syscall.ENOLCK},
		{DeniedGracePeriod, "NLM4_DENIED_GRACE_PERIOD", syscall.ENOLCK},
		{Deadlck, "NLM4_DEADLCK", syscall.EDEADLK},
		{ROFS, "NLM4_ROFS", syscall.EROFS},
		{StaleFH, "NLM4_STALE_FH", syscall.ESTALE},
		{FBig, "NLM4_FBIG", syscall.EOVERFLOW},
		{Failed, "NLM4_FAILED", syscall.ENOLCK},
		{Stat(10), "NLM4_STAT(10)", syscall.ENOLCK},
	}
	for _, c := range cases {
		if c.s.String() != c.name || c.s.Errno() != c.errno {
			t.Errorf("%d: %s %v", uint32(c.s), c.s, c.s.Errno())
		}
		err := fmt.Errorf("lock: %w", c.s)
		if !errors.Is(err, c.s) || !errors.Is(err, c.errno) || c.s.Err() == nil {
			t.Errorf("%s: errors.Is", c.s)
		}
	}
	if Granted.Err() != nil || Granted.String() != "NLM4_GRANTED" || errors.Is(Granted, syscall.Errno(0)) {
		t.Error("Granted")
	}
	if uint32(FBig) != 8 || uint32(Failed) != 9 || uint32(StaleFH) != 7 {
		t.Error("nlm4_stats values")
	}
	for p, name := range map[uint32]string{ProcLock: "LOCK", ProcNSMNotify: "NSM_NOTIFY", ProcFreeAll: "FREE_ALL", ProcShare: "SHARE", 17: "PROC(17)", 99: "PROC(99)"} {
		if ProcName(p) != name {
			t.Errorf("ProcName(%d) = %s", p, ProcName(p))
		}
	}
	if ProcGrantedRes != 15 || ProcNMLock != 22 || ProcFreeAll != 23 || Program != 100021 || Version != 4 {
		t.Error("procedure numbers")
	}
}
