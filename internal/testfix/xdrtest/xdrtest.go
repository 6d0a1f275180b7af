// Package xdrtest checks the XDR codecs of the protocol packages in tests
// (RFC 4506): round trips, truncated input, and fuzzed input that must
// decode, encode again and decode to the same value.
package xdrtest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Message is a value with an XDR encoding: the argument and result types
// of MOUNT, NLM and NSM.
type Message interface {
	Encode(e *xdr.Encoder)
	Decode(d *xdr.Decoder) error
}

// Encode returns m's encoding.
func Encode(m Message) []byte {
	e := xdr.NewEncoder(nil)
	m.Encode(e)
	return e.Bytes()
}

// Fresh returns a new zero value of v's type; v is a pointer.
func Fresh(v Message) Message { return reflect.New(reflect.TypeOf(v).Elem()).Interface().(Message) }

// Words returns the XDR encoding of the unsigned ints v, 4 bytes each.
func Words(v ...uint32) []byte {
	e := xdr.NewEncoder(nil)
	for _, x := range v {
		e.Uint32(x)
	}
	return e.Bytes()
}

// RoundTrip checks that v's encoding decodes, using every byte, to a value
// equal to v, and that each strict prefix of it is xdr.ErrShort.
func RoundTrip(t testing.TB, v Message) {
	t.Helper()
	b := Encode(v)
	decodesTo(t, b, v)
	for cut := 0; cut < len(b); cut++ {
		if err := Fresh(v).Decode(xdr.NewDecoder(b[:cut])); !errors.Is(err, xdr.ErrShort) {
			t.Fatalf("prefix %d: %v", cut, err)
		}
	}
}

// Sample is a named value for RoundTrips and the seed corpus of Fuzz.
type Sample struct {
	Name string
	V    Message
}

// RoundTrips runs RoundTrip on each sample, as a subtest of its name.
func RoundTrips(t *testing.T, samples []Sample) {
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) { RoundTrip(t, s.V) })
	}
}

// Fuzz runs f over a kind (an index into kinds, modulo its length) and
// bytes: a fresh value of the kind's type decodes the bytes, with no
// panic; what decodes encodes again to as many bytes as it used, and
// those decode to an equal value. Each sample seeds the corpus as the
// kind of its type.
func Fuzz(f *testing.F, kinds []Message, samples []Sample) {
	for _, s := range samples {
		for i, k := range kinds {
			if reflect.TypeOf(k) == reflect.TypeOf(s.V) {
				f.Add(uint8(i), Encode(s.V))
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, msg []byte) {
		v := Fresh(kinds[int(kind)%len(kinds)])
		d := xdr.NewDecoder(msg)
		if err := v.Decode(d); err != nil {
			return
		}
		b := Encode(v)
		if len(b) != d.Offset() {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(b), d.Offset())
		}
		decodesTo(t, b, v)
	})
}

// decodesTo checks that b decodes, using every byte, to a value equal to
// v.
func decodesTo(t testing.TB, b []byte, v Message) {
	t.Helper()
	got := Fresh(v)
	d := xdr.NewDecoder(b)
	if err := got.Decode(d); err != nil || d.Remaining() != 0 {
		t.Fatalf("decode: %v, %d of %d bytes left", err, d.Remaining(), len(b))
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("decoded %+v, want %+v", got, v)
	}
}
