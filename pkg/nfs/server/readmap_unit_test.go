package server

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadMapWindowsInUse: a window a reply is being sent from is never
// unmapped: with a bound of one window held by a READ, another window
// cannot be mapped (the READ copies); once released it is evicted for the
// next; a REMOVE (forget) of a file whose window is held unmaps it only
// at its release.
func TestReadMapWindowsInUse(t *testing.T) {
	fd, st := windowsFile(t, 3)
	m := newReadMap(1) // less than a window: one window
	defer m.close()
	w0 := m.get(fd, st, 0)
	if w0 == nil || m.stats().Limit != ReadMapWindow {
		t.Fatalf("first window: %v, %+v", w0, m.stats())
	}
	if w := m.get(fd, st, ReadMapWindow); w != nil {
		t.Fatal("a second window mapped over the bound while the first is in use")
	}
	if w := m.get(fd, st, 10); w != w0 {
		t.Fatal("the same window is not shared")
	}
	m.release(w0)
	m.release(w0)
	w1 := m.get(fd, st, 2*ReadMapWindow)
	if w1 == nil || w0.val != nil || !w0.gone {
		t.Fatalf("the idle window was not evicted for a new one: %v, %+v", w1, m.stats())
	}
	m.forget(st.Dev, st.Ino)
	if s := m.stats(); s.Mapped != 0 || s.Windows != 0 || w1.val == nil {
		t.Fatalf("forget of a window in use: %+v, still mapped %v", s, w1.val != nil)
	}
	if w1.val[0] != 0 { // still readable: a reply may be sending it
		t.Fatal("window bytes")
	}
	m.release(w1)
	if w1.val != nil {
		t.Fatal("a forgotten window stays mapped after its release")
	}
}

// TestReadMapIdle: windows nobody read for the idle time are unmapped,
// not kept until the bound needs them; one a reply is still being sent
// from leaves the table then too, and is unmapped by its release.
func TestReadMapIdle(t *testing.T) {
	fd, st := windowsFile(t, 2)
	m := newReadMap(64 * ReadMapWindow)
	defer m.close()
	m.idle = 20 * time.Millisecond
	// expired waits until no window is mapped and returns whether w is
	// unmapped
	expired := func(w *window) bool {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for m.stats().Windows != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("idle window kept: %+v", m.stats())
			}
			time.Sleep(time.Millisecond)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return w.gone && w.val == nil
	}
	w0 := m.get(fd, st, 0)
	m.release(w0)
	if !expired(w0) || m.stats().Evictions != 1 {
		t.Fatalf("idle window not unmapped: %+v", m.stats())
	}
	w1 := m.get(fd, st, ReadMapWindow)
	if expired(w1) {
		t.Fatal("a window in use unmapped when it expired")
	}
	m.release(w1)
	if w1.val != nil {
		t.Fatal("an expired window stays mapped after its release")
	}
}

// windowsFile returns a file of n read-map windows of zeros, open
// read-only until the test ends, and its stat.
func windowsFile(t *testing.T, n int) (int, *unix.Stat_t) {
	t.Helper()
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, make([]byte, n*ReadMapWindow), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return fd, &st
}

// TestPopulate: the pages of a READ's range in a window are made present
// (the process's minor faults do not grow when they are read after), and a
// range past the end of a file that shrank under the window is refused,
// not a crash.
func TestPopulate(t *testing.T) {
	fd, st := windowsFile(t, 1)
	m := newReadMap(ReadMapWindow)
	defer m.close()
	w := m.get(fd, st, 0)
	if w == nil {
		t.Fatal("no window")
	}
	defer m.release(w)
	const lo, n = 3 * pageSize, 64 * pageSize
	if !populate(w.val, lo+1, n-1) {
		t.Fatal("populate of a range inside the file refused")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := minorFaults(t)
	var s byte
	for i := lo; i < lo+n; i += pageSize {
		s += w.val[i]
	}
	if f := minorFaults(t) - before; f != 0 || s != 0 {
		t.Errorf("%d page faults reading %d populated pages", f, n/pageSize)
	}
	if err := os.Truncate(fmt.Sprintf("/proc/self/fd/%d", fd), 2*pageSize); err != nil {
		t.Fatal(err)
	}
	if populate(w.val, lo, n) {
		t.Error("populate past the end of a file that shrank reported the pages present")
	}
	if !populate(w.val, 0, 2*pageSize) {
		t.Error("populate of what is left of the file refused")
	}
}

// minorFaults is the calling thread's minor page faults so far
// (getrusage RUSAGE_THREAD; lock the goroutine to its thread).
func minorFaults(t *testing.T) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}

// TestReadMapMarkForgetSince: mark tells whether a window is mapped;
// forgetSince unmaps the windows mapped after the mark, and only those.
func TestReadMapMarkForgetSince(t *testing.T) {
	fd, st := windowsFile(t, 2)
	m := newReadMap(64 * ReadMapWindow)
	defer m.close()
	seq, mapped := m.mark()
	if mapped {
		t.Fatal("mark of an empty map: mapped")
	}
	m.forgetSince(seq)
	w0 := m.get(fd, st, 0)
	m.release(w0)
	seq, mapped = m.mark()
	if !mapped {
		t.Fatal("mark with a window: not mapped")
	}
	m.forgetSince(seq)
	if w0.gone {
		t.Fatal("forgetSince unmapped a window mapped before the mark")
	}
	w1 := m.get(fd, st, ReadMapWindow)
	m.release(w1)
	m.forgetSince(seq)
	if s := m.stats(); !w1.gone || w1.val != nil || w0.gone || s.Windows != 1 {
		t.Fatalf("forgetSince: later window gone %v, earlier gone %v, %+v", w1.gone, w0.gone, s)
	}
	if seq, mapped := newReadMap(0).mark(); seq != 0 || mapped {
		t.Fatal("mark with the READ mappings off")
	}
}
