// Package wakeups counts what a benchmark's operations cost the scheduler:
// the context switches of this process, of the kernel's threads and of the
// whole machine (Counts, from getrusage(2) and /proc), and the goroutine
// wake-ups of this process, each named by the code that woke it and the
// code that waited (Trace, from the Go execution tracer). A wake-up is a
// goroutine made runnable after it blocked; a hand-off is one made
// runnable by another goroutine (a channel send, a mutex unlock, a
// sync.Cond), as opposed to by the runtime (the network poller, a timer).
package wakeups

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Counts are context switches counted since boot (Machine, KThreads) or
// since the process started (Voluntary, Involuntary).
type Counts struct {
	// Voluntary and Involuntary are this process's, all its threads
	// (getrusage(2) RUSAGE_SELF ru_nvcsw and ru_nivcsw): a thread that
	// blocks (futex, epoll_wait, a read of /dev/fuse) switches out
	// voluntarily; one preempted, involuntarily.
	Voluntary, Involuntary int64
	// KThreads is the sum over the kernel's threads (PF_KTHREAD:
	// ksoftirqd, kworkers, ...) of their context switches
	// (/proc/PID/status voluntary_ctxt_switches and
	// nonvoluntary_ctxt_switches): the work a process defers to them, e.g.
	// loopback TCP's receive softirq when it runs in ksoftirqd. Other
	// processes' work counts too.
	KThreads int64
	// Machine is every CPU's context switches (/proc/stat ctxt), every
	// process's included: on a shared machine a noisy upper bound.
	Machine int64
}

// Process returns the process's context switches, voluntary and involuntary.
func (c Counts) Process() int64 { return c.Voluntary + c.Involuntary }

// Sub returns c - d.
func (c Counts) Sub(d Counts) Counts {
	return Counts{c.Voluntary - d.Voluntary, c.Involuntary - d.Involuntary, c.KThreads - d.KThreads, c.Machine - d.Machine}
}

// Add returns c + d.
func (c Counts) Add(d Counts) Counts {
	return Counts{c.Voluntary + d.Voluntary, c.Involuntary + d.Involuntary, c.KThreads + d.KThreads, c.Machine + d.Machine}
}

// ReadProcess returns the process's context switches only (one system
// call; the other fields zero).
func ReadProcess() (Counts, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return Counts{}, fmt.Errorf("getrusage: %w", err)
	}
	return Counts{Voluntary: ru.Nvcsw, Involuntary: ru.Nivcsw}, nil
}

// Read returns all the counts. The kernel threads are found by scanning
// /proc, a few milliseconds: read them around a batch of operations, not
// around each.
func Read() (Counts, error) {
	c, err := ReadProcess()
	if err != nil {
		return c, err
	}
	if c.Machine, err = machineCtxt(); err != nil {
		return c, err
	}
	c.KThreads, err = kthreadCtxt()
	return c, err
}

// machineCtxt returns /proc/stat's ctxt.
func machineCtxt() (int64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("ctxt ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/stat: no ctxt line")
}

// pfKthread is the kernel's PF_KTHREAD task flag (include/linux/sched.h),
// field 9 of /proc/PID/stat.
const pfKthread = 0x00200000

// kthreadCtxt returns the context switches of the kernel's threads.
func kthreadCtxt() (int64, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited
		}
		// fields after the command's closing parenthesis: state (3),
		// ppid, pgrp, session, tty_nr, tpgid, flags (9)
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 7 {
			continue
		}
		flags, err := strconv.ParseUint(f[6], 10, 64)
		if err != nil || flags&pfKthread == 0 {
			continue
		}
		n, err := statusCtxt("/proc/" + e.Name() + "/status")
		if err == nil {
			total += n
		}
	}
	return total, nil
}

// statusCtxt returns the sum of a /proc/PID/status file's
// voluntary_ctxt_switches and nonvoluntary_ctxt_switches.
func statusCtxt(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
			continue
		}
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", path, k, err)
		}
		n += x
	}
	return n, sc.Err()
}

// Meter adds up Counts over the intervals between Start and Stop.
type Meter struct {
	total, at Counts
}

// Start reads the counts; b fails if they cannot be read.
func (m *Meter) Start(b testing.TB) {
	c, err := Read()
	if err != nil {
		b.Fatal(err)
	}
	m.at = c
}

// Stop adds the counts since Start.
func (m *Meter) Stop(b testing.TB) {
	c, err := Read()
	if err != nil {
		b.Fatal(err)
	}
	m.total = m.total.Add(c.Sub(m.at))
}

// Total returns the counts added so far.
func (m *Meter) Total() Counts { return m.total }

// Report reports the counts per operation (ops of them, unit naming one,
// e.g. "op" or "file"): ctxsw/UNIT (this process, voluntary and
// involuntary), invol-ctxsw/UNIT, kthread-ctxsw/UNIT and
// machine-ctxsw/UNIT.
func (m *Meter) Report(b *testing.B, ops float64, unit string) {
	if ops <= 0 {
		return
	}
	c := m.total
	b.ReportMetric(float64(c.Process())/ops, "ctxsw/"+unit)
	b.ReportMetric(float64(c.Involuntary)/ops, "invol-ctxsw/"+unit)
	b.ReportMetric(float64(c.KThreads)/ops, "kthread-ctxsw/"+unit)
	b.ReportMetric(float64(c.Machine)/ops, "machine-ctxsw/"+unit)
}
