package sunrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
)

// fragments encodes rec as record-marked fragments of the given sizes (the
// last one takes the rest).
func fragments(rec []byte, sizes ...int) []byte {
	var out []byte
	for _, n := range sizes {
		n = min(n, len(rec))
		out = binary.BigEndian.AppendUint32(out, uint32(n))
		out = append(out, rec[:n]...)
		rec = rec[n:]
	}
	out = binary.BigEndian.AppendUint32(out, lastFragment|uint32(len(rec)))
	return append(out, rec...)
}

func TestReadRecord(t *testing.T) {
	rec := bytes.Repeat([]byte("0123456789abcdef"), 10)
	tests := []struct {
		name    string
		stream  []byte
		max     int
		want    [][]byte
		wantErr error
	}{
		{"one fragment", fragments(rec), 1000, [][]byte{rec}, io.EOF},
		{"many fragments", fragments(rec, 1, 2, 3, 0, 50), 1000, [][]byte{rec}, io.EOF},
		{"two records", append(fragments(rec, 7), fragments(rec[:9])...), 1000, [][]byte{rec, rec[:9]}, io.EOF},
		{"empty record", fragments(nil), 1000, [][]byte{{}}, io.EOF},
		{"exactly max", fragments(rec, 80), len(rec), [][]byte{rec}, io.EOF},
		{"one over max", fragments(rec), len(rec) - 1, nil, ErrRecordTooLarge},
		{"fragments over max", fragments(rec, 60, 60), 100, nil, ErrRecordTooLarge},
		{"hostile 2 GiB header", []byte{0xff, 0xff, 0xff, 0xff}, DefaultMaxRecordSize, nil, ErrRecordTooLarge},
		{"truncated header", fragments(rec)[:2], 1000, nil, ErrMalformed},
		{"truncated fragment", fragments(rec)[:50], 1000, nil, ErrMalformed},
		{"ends after non-last fragment", fragments(rec, 10)[:14], 1000, nil, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rr := recordReader{r: bytes.NewReader(tt.stream), max: tt.max}
			var buf []byte
			for i := 0; ; i++ {
				got, err := rr.readRecord(buf)
				if err != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("record %d: err = %v, want %v", i, err, tt.wantErr)
					}
					if i != len(tt.want) {
						t.Fatalf("read %d records, want %d", i, len(tt.want))
					}
					if cap(got) > tt.max {
						t.Fatalf("buffer grew to %d", cap(got))
					}
					return
				}
				if i >= len(tt.want) || !bytes.Equal(got, tt.want[i]) {
					t.Fatalf("record %d = %q", i, got)
				}
				buf = got
			}
		})
	}
}

func TestRecordWriter(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := recordWriter{conn: a}
	payload := []byte{1, 2, 3, 4, 5}
	m := Message{Head: []byte{0, 0, 0, 9, 0, 0, 0, 5}, Payload: payload, Tail: []byte{7, 7, 7, 7}, HasPayload: true}
	go func() {
		if n, err := w.write(&m); err != nil || n != int64(4+m.Len()) {
			t.Errorf("write: %d, %v", n, err)
		}
	}()
	rr := recordReader{r: b, max: 100}
	got, err := rr.readRecord(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := m.AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}
