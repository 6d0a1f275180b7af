// Package nsmstate keeps a host's NSM state number on disk (X/Open XNFS,
// Version 3W, chapter 11 "SM: Status Monitor protocol"), as rpc.statd
// keeps /var/lib/nfs/statd/state: a decimal number, odd while the host is
// up and even while it is down, increased at every change, so that the
// peers a host notifies after a restart see a state they have not seen
// before. A host that comes up after a crash finds the odd number it left
// and goes on with the next odd one. The files next to it (the monitored
// hosts) are replaced durably with internal/atomicfile.
package nsmstate

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/atomicfile"
)

// ErrBad means the state file does not hold a state number: a decimal
// from 0 to 2^31-1.
var ErrBad = errors.New("nsm state: not a state number")

// Read returns the state number in the file path, 0 when there is no
// such file. Errors: ErrBad (wrapped, with the path and content) for
// anything else than a number from 0 to 2^31-1 with white space around
// it, and the file's I/O errors.
func Read(path string) (int32, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("nsm state: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s holds %q", ErrBad, path, b)
	}
	return int32(n), nil
}

// Next returns the state number of a host coming up whose last recorded
// number is n: n+2 when n is odd (it went down without recording it),
// n+1 when n is even; 1 when that would pass 2^31-1, or for a negative n.
func Next(n int32) int32 {
	next := int64(n) + 1
	if n&1 == 1 {
		next++
	}
	if n < 0 || next > math.MaxInt32 {
		return 1
	}
	return int32(next)
}

// Write records n in the file path, durably (atomicfile.Write).
func Write(path string, n int32) error {
	return atomicfile.Write(path, []byte(strconv.Itoa(int(n))+"\n"))
}

// Up records that the host whose state file is path came up: it reads
// the number there, writes Next of it and returns that. Errors: those of
// Read and Write.
func Up(path string) (int32, error) {
	n, err := Read(path)
	if err != nil {
		return 0, err
	}
	n = Next(n)
	if err := Write(path, n); err != nil {
		return 0, err
	}
	return n, nil
}

// Volatile returns a state number for a host that keeps none on disk:
// odd, from the clock in seconds (below 2^31), so that each start of the
// process is very likely to give a number above the last one.
func Volatile() int32 {
	return int32(uint32(time.Now().Unix())&math.MaxInt32) | 1
}
