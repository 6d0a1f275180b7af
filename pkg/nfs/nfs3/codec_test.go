package nfs3

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func checkRoundTrip(t *testing.T, s sample, fresh any) {
	t.Helper()
	b := encodeInline(s.v)
	if len(b)%4 != 0 {
		t.Fatalf("encoded %d bytes, not a multiple of 4", len(b))
	}
	n, err := decodeInto(fresh, b, nil, false)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, hex.Dump(b))
	}
	if n != len(b) {
		t.Fatalf("decode consumed %d of %d bytes", n, len(b))
	}
	if !reflect.DeepEqual(s.v, fresh) {
		t.Fatalf("round trip mismatch\n got %+v\nwant %+v", fresh, s.v)
	}
	// Every strict prefix is an error, never a panic or a success.
	for cut := 0; cut < len(b); cut += 1 + len(b)/97 {
		v := reflect.New(reflect.TypeOf(fresh).Elem()).Interface()
		if _, err := decodeInto(v, b[:cut], nil, false); !errors.Is(err, xdr.ErrShort) {
			t.Fatalf("prefix of %d/%d bytes: err %v, want xdr.ErrShort", cut, len(b), err)
		}
	}
	// DDP-eligible items: the split encoding is the inline one without the
	// item, and decoding with the item placed gives the same value.
	if m, ok := s.v.(DDPMessage); ok {
		head, payload := encodeSplit(m)
		tcp := append(append(append([]byte(nil), head...), payload...), make([]byte, xdr.Pad(len(payload)))...)
		if !bytes.Equal(tcp, b) {
			t.Fatalf("head+payload+pad differs from inline encoding")
		}
		v := reflect.New(reflect.TypeOf(fresh).Elem()).Interface()
		n, err := decodeInto(v, head, payload, true)
		if err != nil || n != len(head) {
			t.Fatalf("placed decode: consumed %d of %d, err %v", n, len(head), err)
		}
		if !reflect.DeepEqual(s.v, v) {
			t.Fatalf("placed round trip mismatch\n got %+v\nwant %+v", v, s.v)
		}
	}
}

func TestArgsRoundTrip(t *testing.T) {
	seen := map[uint32]bool{}
	for _, s := range argSamples() {
		seen[s.proc] = true
		t.Run(s.name, func(t *testing.T) { checkRoundTrip(t, s, newArgs(s.proc)) })
	}
	for p := uint32(1); p < NumProcs; p++ {
		if !seen[p] {
			t.Errorf("no argument sample for %s", ProcName(p))
		}
	}
}

func TestResultsRoundTrip(t *testing.T) {
	ok, fail := map[uint32]bool{}, map[uint32]bool{}
	for _, s := range resSamples() {
		st := reflect.ValueOf(s.v).Elem().FieldByName("Status").Interface().(Status)
		if st == OK {
			ok[s.proc] = true
		} else {
			fail[s.proc] = true
		}
		t.Run(s.name, func(t *testing.T) { checkRoundTrip(t, s, newRes(s.proc)) })
	}
	for p := uint32(1); p < NumProcs; p++ {
		if !ok[p] || !fail[p] {
			t.Errorf("%s: resok sample %v, resfail sample %v", ProcName(p), ok[p], fail[p])
		}
	}
}

// Decode into a value that already holds data must not keep any of it.
func TestDecodeOverwrites(t *testing.T) {
	for _, s := range resSamples() {
		b := encodeInline(s.v)
		for _, o := range resSamples() {
			if o.proc != s.proc {
				continue
			}
			v := reflect.New(reflect.TypeOf(o.v).Elem())
			v.Elem().Set(reflect.ValueOf(o.v).Elem())
			if _, err := decodeInto(v.Interface(), b, nil, false); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v.Interface(), s.v) {
				t.Fatalf("%s decoded over %s: got %+v", s.name, o.name, v.Interface())
			}
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// GETATTR3res, resok, checked against hand-assembled bytes (RFC 1813
// sections 2.5 and 3.3.1): 4 bytes of status then 84 bytes of fattr3.
func TestGetattrResBytes(t *testing.T) {
	want := mustHex(t, `
		00000000
		00000002 000001ed 00000003 000003e8 00000064
		00000000 00001000 00000000 00002000
		00000000 00000000
		11223344 55667788
		00000000 000a0b0c
		65000000 00000001 65000001 00000002 65000002 00000003`)
	r := GetattrRes{Status: OK, Attr: Fattr{
		Type: TypeDir, Mode: 0o755, Nlink: 3, UID: 1000, GID: 100,
		Size: 4096, Used: 8192, FSID: 0x1122334455667788, FileID: 0xa0b0c,
		Atime: Time{0x65000000, 1}, Mtime: Time{0x65000001, 2}, Ctime: Time{0x65000002, 3},
	}}
	got := encodeInline(&r)
	if len(got) != 88 || !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes\n%s\nwant\n%s", len(got), hex.Dump(got), hex.Dump(want))
	}
	var back GetattrRes
	if err := back.Decode(xdr.NewDecoder(want)); err != nil || back != r {
		t.Fatalf("decode: %v %+v", err, back)
	}
	if back.Attr.FileMode().String() != "drwxr-xr-x" {
		t.Fatalf("FileMode %v", back.Attr.FileMode())
	}
}

func TestLookupArgsBytes(t *testing.T) {
	want := mustHex(t, `
		00000005 0102030405000000
		00000003 61626300`)
	a := LookupArgs{What: DirOpArgs{Dir: MustFH([]byte{1, 2, 3, 4, 5}), Name: "abc"}}
	if got := encodeInline(&a); !bytes.Equal(got, want) {
		t.Fatalf("got\n%s", hex.Dump(got))
	}
}

// WRITE3args split for a Read chunk: the head ends with data's length word
// and the data is returned, not appended.
func TestWriteArgsBytes(t *testing.T) {
	data := []byte("hello")
	a := WriteArgs{File: MustFH([]byte{0xaa, 0xbb, 0xcc, 0xdd}), Offset: 0x100000000, Stable: FileSync, Data: data}
	head, payload := encodeSplit(&a)
	want := mustHex(t, `
		00000004 aabbccdd
		00000001 00000000
		00000005
		00000002
		00000005`)
	if !bytes.Equal(head, want) {
		t.Fatalf("head\n%s", hex.Dump(head))
	}
	if &payload[0] != &data[0] || len(payload) != 5 {
		t.Fatal("payload does not alias Data")
	}
	inline := encodeInline(&a)
	if !bytes.Equal(inline, append(append(want, data...), 0, 0, 0)) {
		t.Fatalf("inline\n%s", hex.Dump(inline))
	}
}

// READ3res head for a Write chunk: status, post_op_attr, count, eof, length.
func TestReadResBytes(t *testing.T) {
	r := ReadRes{Status: OK, EOF: true, Data: make([]byte, 6)}
	head, payload := encodeSplit(&r)
	want := mustHex(t, `00000000 00000000 00000006 00000001 00000006`)
	if !bytes.Equal(head, want) || len(payload) != 6 {
		t.Fatalf("head\n%s", hex.Dump(head))
	}
	fail := ReadRes{Status: ErrIO}
	head, payload = encodeSplit(&fail)
	if !bytes.Equal(head, mustHex(t, `00000005 00000000`)) || payload != nil {
		t.Fatalf("fail head\n%s payload %v", hex.Dump(head), payload)
	}
}

func TestDDPDecodeContract(t *testing.T) {
	r := ReadRes{Status: OK, Data: []byte("0123456789")}
	head, _ := encodeSplit(&r)

	// Placed: the item comes from payload, aliased; extra bytes ignored.
	chunk := []byte("0123456789\x00\x00")
	var got ReadRes
	d := xdr.NewDecoder(head)
	if err := got.Decode(d, chunk, true); err != nil {
		t.Fatal(err)
	}
	if &got.Data[0] != &chunk[0] || string(got.Data) != "0123456789" || d.Remaining() != 0 {
		t.Fatalf("placed: %q aliased=%v", got.Data, &got.Data[0] == &chunk[0])
	}

	// Placed but short: ErrShort.
	if err := got.Decode(xdr.NewDecoder(head), chunk[:9], true); !errors.Is(err, xdr.ErrShort) {
		t.Fatalf("short placed payload: %v", err)
	}

	// Inline: aliases the decoder's input, padding consumed.
	in := encodeInline(&r)
	d = xdr.NewDecoder(in)
	if err := got.Decode(d, nil, false); err != nil {
		t.Fatal(err)
	}
	if &got.Data[0] != &in[len(head)] || d.Remaining() != 0 {
		t.Fatal("inline data does not alias the input")
	}

	// Caller maximum.
	if err := got.DecodeMax(xdr.NewDecoder(in), nil, false, 9); !errors.Is(err, xdr.ErrTooLong) {
		t.Fatalf("max 9: %v", err)
	}
	if err := got.DecodeMax(xdr.NewDecoder(in), nil, false, 10); err != nil {
		t.Fatalf("max 10: %v", err)
	}
	var w WriteArgs
	big := WriteArgs{Data: make([]byte, DefaultMaxData+1)}
	if err := w.Decode(xdr.NewDecoder(encodeInline(&big)), nil, false); !errors.Is(err, xdr.ErrTooLong) {
		t.Fatalf("write above DefaultMaxData: %v", err)
	}
	if err := w.DecodeMax(xdr.NewDecoder(encodeInline(&big)), nil, false, DefaultMaxData+4); err != nil {
		t.Fatal(err)
	}

	// Paths are bounded by MaxPathLen.
	sl := SymlinkArgs{Path: make([]byte, MaxPathLen+1)}
	var sa SymlinkArgs
	if err := sa.Decode(xdr.NewDecoder(encodeInline(&sl)), nil, false); !errors.Is(err, xdr.ErrTooLong) {
		t.Fatalf("long symlink: %v", err)
	}
	rl := ReadlinkRes{Status: OK, Path: make([]byte, MaxPathLen+1)}
	head, payload := encodeSplit(&rl)
	var ra ReadlinkRes
	if err := ra.Decode(xdr.NewDecoder(head), payload, true); !errors.Is(err, xdr.ErrTooLong) {
		t.Fatalf("long readlink: %v", err)
	}

	// A failed result ignores payload.
	fr := ReadlinkRes{Status: ErrStale}
	if err := ra.Decode(xdr.NewDecoder(encodeInline(&fr)), []byte("junk"), true); err != nil || ra.Path != nil {
		t.Fatalf("failed readlink with payload: %v %q", err, ra.Path)
	}
}

func TestCountMismatch(t *testing.T) {
	w := WriteArgs{File: fh(4, 1), Data: []byte("abcd")}
	b := encodeInline(&w)
	b[8+8+3] = 3 // count word after fh (8) and offset (8)
	var got WriteArgs
	if err := got.Decode(xdr.NewDecoder(b), nil, false); !errors.Is(err, ErrCountMismatch) {
		t.Fatalf("write: %v", err)
	}
	r := ReadRes{Status: OK, Data: []byte("abcd")}
	b = encodeInline(&r)
	b[8+3] = 5 // count after status and post_op_attr(false)
	var rr ReadRes
	if err := rr.Decode(xdr.NewDecoder(b), nil, false); !errors.Is(err, ErrCountMismatch) {
		t.Fatalf("read: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	u := xdrtest.Words
	cases := []struct {
		name string
		v    any
		in   []byte
		want error
	}{
		{"fh longer than 64", new(GetattrArgs), u(65), xdr.ErrTooLong},
		{"name longer than 255", new(LookupArgs), append(u(0, 256), make([]byte, 256)...), xdr.ErrTooLong},
		{"bad createmode", new(CreateArgs), u(0, 0, 3), xdr.ErrBadDiscriminant},
		{"bad time_how", new(SetattrArgs), u(0, 0, 0, 0, 0, 3, 0, 0), xdr.ErrBadDiscriminant},
		{"bad bool in sattr", new(MkdirArgs), u(0, 0, 2), xdr.ErrBadBool},
		{"bad stable_how", new(WriteArgs), u(0, 0, 0, 0, 3, 0), xdr.ErrBadDiscriminant},
		{"bad committed", new(WriteRes), u(0, 0, 0, 0, 7, 0, 0), xdr.ErrBadDiscriminant},
		{"fail arm carries nothing", new(GetattrRes), u(1), nil},
		{"bad value_follows", new(ReaddirRes), u(0, 0, 0, 0, 2), xdr.ErrBadBool},
		{"readdir entry name too long", new(ReaddirRes), append(u(0, 0, 0, 0, 1, 0, 1, 300), make([]byte, 300)...), xdr.ErrTooLong},
		{"readdirplus handle too long", new(ReaddirplusRes), u(0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1, 65), xdr.ErrTooLong},
	}
	for _, c := range cases {
		_, err := decodeInto(c.v, c.in, nil, false)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

// A hostile READDIR reply announcing a long list must not make the
// decoder allocate for entries the input does not hold.
func TestReaddirBoundedAllocation(t *testing.T) {
	e := xdr.NewEncoder(nil)
	e.Uint32(0)      // OK
	e.Bool(false)    // no dir attrs
	e.Uint64(0)      // verifier
	for range 1000 { // 1000 well-formed entries, then truncation
		e.Bool(true)
		e.Uint64(1)
		e.String("")
		e.Uint64(2)
	}
	e.Bool(true) // one more, cut short
	b := e.Bytes()
	var r ReaddirRes
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := r.Decode(xdr.NewDecoder(b))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, xdr.ErrShort) {
		t.Fatal(err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1000*uint64(unsafe.Sizeof(Entry{}))/2 || r.Entries != nil {
		t.Fatalf("truncated list: %d bytes allocated, entries %d", n, len(r.Entries))
	}
	// Complete list: one allocation of exactly the entries.
	e.Uint64(1)
	e.String("")
	e.Uint64(3)
	e.Bool(false)
	e.Bool(true)
	b = e.Bytes()
	if err := r.Decode(xdr.NewDecoder(b)); err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 1001 || cap(r.Entries) != 1001 || !r.EOF {
		t.Fatalf("len %d cap %d eof %v", len(r.Entries), cap(r.Entries), r.EOF)
	}
	// Decoding again reuses the slice: no allocation (empty names).
	allocs := testing.AllocsPerRun(10, func() {
		if err := r.Decode(xdr.NewDecoder(b)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("re-decode allocated %v times", allocs)
	}
}

func TestFH(t *testing.T) {
	if _, err := NewFH(make([]byte, 65)); !errors.Is(err, xdr.ErrTooLong) {
		t.Fatalf("65-byte handle: %v", err)
	}
	a := MustFH([]byte{1, 2, 3})
	b := MustFH([]byte{1, 2, 3})
	c := MustFH([]byte{1, 2, 3, 0})
	m := map[FH]int{a: 1}
	if m[b] != 1 || a != b || a == c {
		t.Fatal("FH equality")
	}
	if a.String() != "010203" || a.Len() != 3 || !bytes.Equal(a.Bytes(), []byte{1, 2, 3}) || a.IsEmpty() || !(FH{}).IsEmpty() {
		t.Fatal("FH accessors")
	}
	// Decoding a shorter handle over a longer one leaves no stale bytes.
	long := fh(64, 9)
	enc := xdr.NewEncoder(nil)
	a.Encode(enc)
	if err := long.Decode(xdr.NewDecoder(enc.Bytes())); err != nil || long != a {
		t.Fatalf("decode over: %v %v", err, long)
	}
	if n := testing.AllocsPerRun(10, func() { _ = long.Decode(xdr.NewDecoder(enc.Bytes())) }); n != 0 {
		t.Fatalf("FH decode allocates %v", n)
	}
}

func TestProcName(t *testing.T) {
	if ProcName(ProcReaddirplus) != "READDIRPLUS" || ProcName(ProcCommit) != "COMMIT" || ProcName(22) != "PROC(22)" {
		t.Fatal(ProcName(ProcReaddirplus), ProcName(22))
	}
	if !DDPEligibleArg(ProcWrite) || !DDPEligibleArg(ProcSymlink) || DDPEligibleArg(ProcRead) ||
		!DDPEligibleResult(ProcRead) || !DDPEligibleResult(ProcReadlink) || DDPEligibleResult(ProcWrite) {
		t.Fatal("DDP eligibility")
	}
}

// TestWriteArgsDecodeVec: WRITE data placed in pieces is taken as them
// (Data nil), and a length word or count that disagrees with the pieces'
// total, or data over the maximum, is refused.
func TestWriteArgsDecodeVec(t *testing.T) {
	w := WriteArgs{File: fh(8, 3), Offset: 1 << 33, Stable: DataSync, Data: bytesOf(20000, 2)}
	head, item := encodeSplit(&w)
	var a WriteArgs
	if err := a.DecodeVec(xdr.NewDecoder(head), [][]byte{item[:8192], item[8192:]}, DefaultMaxData); err != nil || a.Data != nil || a.Offset != w.Offset || a.Stable != w.Stable || a.File != w.File {
		t.Fatalf("%+v, %v", a, err)
	}
	for name, vec := range map[string][][]byte{"short": {item[:8192]}, "long": {item, {1, 2, 3, 4}}} {
		if err := a.DecodeVec(xdr.NewDecoder(head), vec, DefaultMaxData); !errors.Is(err, xdr.ErrShort) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := a.DecodeVec(xdr.NewDecoder(head), [][]byte{item}, 1000); !errors.Is(err, xdr.ErrTooLong) {
		t.Fatalf("over the maximum: %v", err)
	}
	b := append([]byte(nil), head...)
	b[len(b)-9] ^= 1 // count, before stable_how and the length word
	if err := a.DecodeVec(xdr.NewDecoder(b), [][]byte{item}, DefaultMaxData); !errors.Is(err, ErrCountMismatch) {
		t.Fatalf("count: %v", err)
	}
}
