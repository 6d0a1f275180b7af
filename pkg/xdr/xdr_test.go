package xdr

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	e := NewEncoder(nil)
	e.Uint32(7)
	e.Int32(-2)
	e.Uint64(1 << 40)
	e.Bool(true)
	e.Opaque([]byte("abcde"))
	e.String("xy")
	e.Fixed([]byte{1, 2, 3})
	if e.Len()%4 != 0 {
		t.Fatalf("encoded length %d not a multiple of 4", e.Len())
	}
	d := NewDecoder(e.Bytes())
	if v := d.Uint32(); v != 7 {
		t.Fatalf("uint32 %d", v)
	}
	if v := d.Int32(); v != -2 {
		t.Fatalf("int32 %d", v)
	}
	if v := d.Uint64(); v != 1<<40 {
		t.Fatalf("uint64 %d", v)
	}
	if !d.Bool() {
		t.Fatal("bool")
	}
	if v := d.Opaque(5); string(v) != "abcde" {
		t.Fatalf("opaque %q", v)
	}
	if v := d.String(2); v != "xy" {
		t.Fatalf("string %q", v)
	}
	if v := d.Fixed(3); !bytes.Equal(v, []byte{1, 2, 3}) {
		t.Fatalf("fixed %v", v)
	}
	if d.Err() != nil || d.Remaining() != 0 {
		t.Fatalf("err %v remaining %d", d.Err(), d.Remaining())
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		read func(*Decoder)
		want error
	}{
		{"short uint32", []byte{0, 0, 1}, func(d *Decoder) { d.Uint32() }, ErrShort},
		{"short hyper", []byte{0, 0, 0, 0, 1}, func(d *Decoder) { d.Uint64() }, ErrShort},
		{"bad bool", []byte{0, 0, 0, 2}, func(d *Decoder) { d.Bool() }, ErrBadBool},
		{"too long", []byte{0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0}, func(d *Decoder) { d.Opaque(8) }, ErrTooLong},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, func(d *Decoder) { d.Opaque(1 << 30) }, ErrTooLong},
		{"opaque past end", []byte{0, 0, 0, 8, 1, 2, 3, 4}, func(d *Decoder) { d.Opaque(100) }, ErrShort},
		{"missing pad", []byte{0, 0, 0, 1, 9}, func(d *Decoder) { d.Opaque(100) }, ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.in)
			tc.read(d)
			if !errors.Is(d.Err(), tc.want) {
				t.Fatalf("got %v, want %v", d.Err(), tc.want)
			}
			// the error sticks and later reads return zero values
			if d.Uint32() != 0 || !errors.Is(d.Err(), tc.want) {
				t.Fatal("error did not stick")
			}
		})
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		for d.Err() == nil && d.Remaining() > 0 {
			switch d.Remaining() % 3 {
			case 0:
				d.Opaque(64)
			case 1:
				d.Bool()
			default:
				d.Uint64()
			}
		}
		if d.Offset() > len(b) {
			t.Fatalf("offset %d past input %d", d.Offset(), len(b))
		}
	})
}
