package perftest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Test is a kind of measurement.
type Test string

// The tests, named as the perftest tools name them.
const (
	// WriteBW: the client RDMA Writes Size bytes into the server's buffer,
	// Depth outstanding, Iters times; a Send then tells the server the run
	// is done (ib_write_bw).
	WriteBW Test = "write_bw"
	// ReadBW: the client RDMA Reads Size bytes from the server's buffer,
	// Depth outstanding (bounded by the negotiated ORD), Iters times
	// (ib_read_bw).
	ReadBW Test = "read_bw"
	// SendBW: the client Sends Size-byte messages into receives the server
	// posted, Depth outstanding, with credits the server returns as it
	// reposts its receives (iWARP has no receiver-not-ready retry).
	SendBW Test = "send_bw"
	// SendLat: a Send ping-pong of Size bytes (64 by default): the client
	// sends, the server's receive completion triggers its Send back
	// (ib_send_lat).
	SendLat Test = "send_lat"
)

// Tests lists every test.
var Tests = []Test{WriteBW, ReadBW, SendBW, SendLat}

func (t Test) String() string { return string(t) }

// Set parses a test name (it makes Test a flag value).
func (t *Test) Set(s string) error {
	for _, k := range Tests {
		if string(k) == s {
			*t = k
			return nil
		}
	}
	return fmt.Errorf("unknown test %q (want one of write_bw, read_bw, send_bw, send_lat)", s)
}

// Type names the flag value type.
func (t *Test) Type() string { return "test" }

// Latency reports whether the test measures latency (not bandwidth).
func (t Test) Latency() bool { return t == SendLat }

func (t Test) code() uint8 {
	for i, k := range Tests {
		if k == t {
			return uint8(i + 1)
		}
	}
	return 0
}

func testFromCode(c uint8) (Test, bool) {
	if c == 0 || int(c) > len(Tests) {
		return "", false
	}
	return Tests[c-1], true
}

// ByteSize is a size in bytes. As a flag it accepts a plain number of bytes
// or one with a binary suffix: 4KiB, 1MiB, 1GiB (K, M, G are the same).
type ByteSize int64

// ParseByteSize parses "64", "4KiB", "1MiB", "2G" into bytes.
func ParseByteSize(s string) (ByteSize, error) {
	num := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number with KiB, MiB or GiB)", s)
	}
	return ByteSize(n * mult), nil
}

// String formats the size with the largest binary unit that divides it.
func (b ByteSize) String() string {
	switch {
	case b == 0:
		return "0"
	case b%(1<<30) == 0:
		return strconv.FormatInt(int64(b>>30), 10) + "GiB"
	case b%(1<<20) == 0:
		return strconv.FormatInt(int64(b>>20), 10) + "MiB"
	case b%(1<<10) == 0:
		return strconv.FormatInt(int64(b>>10), 10) + "KiB"
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set parses a size (it makes ByteSize a flag value).
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type names the flag value type.
func (b *ByteSize) Type() string { return "size" }

// Limits on what a client may ask of a server.
const (
	// MaxSize is the largest message, bytes.
	MaxSize = 1 << 30
	// MaxDepth is the most work requests a client keeps outstanding.
	MaxDepth = 1024
	// MaxServerMemory bounds what one connection makes the server register,
	// bytes (send_bw registers Depth receive buffers of Size bytes).
	MaxServerMemory = 1 << 30
)

// Defaults.
const (
	DefaultSize    = 1 << 20 // bytes, bandwidth tests
	DefaultLatSize = 64      // bytes, send_lat
	DefaultIters   = 1000
	DefaultDepth   = 16
)

// Options describe one run.
type Options struct {
	Test Test
	// Size is the message size, bytes; 0 means DefaultSize (DefaultLatSize
	// for send_lat).
	Size ByteSize
	// Iters is the number of messages (round trips for send_lat); 0 means
	// DefaultIters.
	Iters int
	// Depth is the number of work requests kept outstanding (bandwidth
	// tests; send_lat has one in flight); 0 means DefaultDepth.
	Depth int
	// NoCRC turns MPA CRC32c off (both ends must agree; a perftest server
	// follows the client).
	NoCRC bool
	// FPDUPathMSS sizes the client's FPDUs by the path MSS, as Linux siw
	// does, instead of ULPDU (the server always sends ULPDU-sized FPDUs).
	FPDUPathMSS bool
	// Verify fills the source with a pattern and checks the sink.
	Verify bool
	// Baseline also measures the same byte movement over a raw TCP loopback
	// socket and reports the ratio.
	Baseline bool
	// Timeout bounds the whole run (0: no bound beyond the caller's context).
	Timeout time.Duration

	// corruptSink, for tests, damages the sink just before it is verified.
	corruptSink func([]byte)
}

// withDefaults fills zero fields and checks the rest.
func (o Options) withDefaults() (Options, error) {
	if o.Test == "" {
		o.Test = WriteBW
	}
	if o.Test.code() == 0 {
		return o, fmt.Errorf("perftest: unknown test %q", o.Test)
	}
	if o.Size == 0 {
		o.Size = DefaultSize
		if o.Test.Latency() {
			o.Size = DefaultLatSize
		}
	}
	if o.Iters == 0 {
		o.Iters = DefaultIters
	}
	if o.Depth == 0 {
		o.Depth = DefaultDepth
	}
	if o.Test.Latency() {
		o.Depth = 1
	}
	switch {
	case o.Size < 1 || o.Size > MaxSize:
		return o, fmt.Errorf("perftest: size %d bytes outside [1, %d]", o.Size, MaxSize)
	case o.Iters < 1 || o.Iters > 1<<31-1:
		return o, fmt.Errorf("perftest: iters %d outside [1, %d]", o.Iters, 1<<31-1)
	case o.Depth < 1 || o.Depth > MaxDepth:
		return o, fmt.Errorf("perftest: depth %d outside [1, %d]", o.Depth, MaxDepth)
	case o.Test == SendBW && int64(o.Size)*int64(o.Depth) > MaxServerMemory:
		return o, fmt.Errorf("perftest: send_bw needs depth x size = %d bytes of receive buffers, more than %d", int64(o.Size)*int64(o.Depth), MaxServerMemory)
	}
	return o, nil
}
