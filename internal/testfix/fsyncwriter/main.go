// Command fsyncwriter writes a file block by block, each block followed by
// fsync(2) and read back, until told to stop: the application of the node
// test's upgrade and crash steps, built statically into the lock taker's
// image.
//
//	fsyncwriter [-block BYTES] [-interval D] [-max BYTES] -stop FILE PATH
//
// It creates PATH (truncating it) and, every interval, writes the next block
// of random bytes at the end of what was acknowledged, fsyncs the file and
// reads the block back (pread), comparing it. A block counts as acknowledged
// once its write, fsync and read back succeeded; the SHA-256 it prints is that of the
// acknowledged blocks in order, so that the file read afterwards must have
// exactly that size and digest.
//
// An error (write, fsync, read back, mismatch) is printed at once as
//
//	error TIME OP off=N: ERR
//
// TIME being UTC to the microsecond; the writer then closes the file, opens it
// again (retrying every 100 ms until it can or FILE exists; the first of a
// run of failures and every 50th printed the same way), truncates
// it to the acknowledged size, fsyncs, and goes on. The block that failed is
// not acknowledged, whether or not it reached the server.
//
// When FILE exists (or -max bytes were acknowledged) it closes PATH and prints
//
//	done bytes=N sha256=HEX writes=N errors=N maxgap=D maxgap_at=TIME
//	gap D at TIME       (the longest gaps, at most 5, of 100 ms or more)
//
// where a gap is the time between two successive acknowledged blocks and
// its TIME is when the later one was acknowledged. The exit status is 0 even
// when errors were seen: the caller judges them.
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"
)

func main() {
	block := flag.Int("block", 4096, "bytes per write")
	interval := flag.Duration("interval", 10*time.Millisecond, "pause between two writes")
	maxBytes := flag.Int64("max", 256<<20, "stop after this many acknowledged bytes")
	stop := flag.String("stop", "", "stop once this file exists")
	flag.Parse()
	if flag.NArg() != 1 || *stop == "" || *block <= 0 {
		fmt.Println("usage: fsyncwriter [-block BYTES] [-interval D] [-max BYTES] -stop FILE PATH")
		os.Exit(2)
	}
	w := &writer{path: flag.Arg(0), buf: make([]byte, *block), back: make([]byte, *block)}
	f, err := os.OpenFile(w.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Println("error", stamp(time.Now()), "open off=0:", err)
		os.Exit(1)
	}
	w.f = f
	h := sha256.New()
	last := time.Now()
	for w.acked < *maxBytes {
		if _, err := os.Stat(*stop); err == nil {
			break
		}
		if _, err := rand.Read(w.buf); err != nil {
			panic(err)
		}
		if op, err := w.step(); err != nil {
			if !w.fail(op, err, *stop) {
				break
			}
			continue
		}
		h.Write(w.buf)
		w.acked += int64(len(w.buf))
		w.writes++
		now := time.Now()
		w.gaps = append(w.gaps, gap{now.Sub(last), now})
		last = now
		time.Sleep(*interval)
	}
	if w.f != nil {
		w.f.Close()
	}
	sort.Slice(w.gaps, func(i, j int) bool { return w.gaps[i].d > w.gaps[j].d })
	top := gap{}
	if len(w.gaps) > 0 {
		top = w.gaps[0]
	}
	fmt.Printf("done bytes=%d sha256=%x writes=%d errors=%d maxgap=%v maxgap_at=%s\n",
		w.acked, h.Sum(nil), w.writes, w.errors, top.d.Round(time.Millisecond), stamp(top.at))
	for i := 0; i < len(w.gaps) && i < 5 && w.gaps[i].d >= 100*time.Millisecond; i++ {
		fmt.Printf("gap %v at %s\n", w.gaps[i].d.Round(time.Millisecond), stamp(w.gaps[i].at))
	}
}

type gap struct {
	d  time.Duration
	at time.Time
}

type writer struct {
	path      string
	f         *os.File
	buf, back []byte
	acked     int64 // bytes acknowledged by fsync
	writes    int
	errors    int
	gaps      []gap
}

// step writes buf at the acknowledged end, fsyncs and reads it back; it
// returns the operation that failed.
func (w *writer) step() (string, error) {
	if _, err := w.f.WriteAt(w.buf, w.acked); err != nil {
		return "write", err
	}
	if err := w.f.Sync(); err != nil {
		return "fsync", err
	}
	if _, err := w.f.ReadAt(w.back, w.acked); err != nil {
		return "read", err
	}
	if !bytes.Equal(w.buf, w.back) {
		return "read", errors.New("the block read back differs from the block written")
	}
	return "", nil
}

// fail prints the error and reopens the file at the acknowledged size,
// retrying until it can or stop exists (then it returns false). Of a run of
// failed reopens, the first and every 50th are printed.
func (w *writer) fail(op string, err error, stop string) bool {
	w.errors++
	fmt.Println("error", stamp(time.Now()), op, fmt.Sprintf("off=%d:", w.acked), err)
	w.f.Close()
	w.f = nil
	for n := 0; ; n++ {
		f, err := os.OpenFile(w.path, os.O_RDWR, 0)
		if err == nil {
			err = f.Truncate(w.acked)
			if err == nil {
				err = f.Sync()
			}
			if err == nil {
				w.f = f
				return true
			}
			f.Close()
		}
		w.errors++
		if n%50 == 0 {
			fmt.Println("error", stamp(time.Now()), "reopen", fmt.Sprintf("off=%d:", w.acked), err)
		}
		if _, err := os.Stat(stop); err == nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
