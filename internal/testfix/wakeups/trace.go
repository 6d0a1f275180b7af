package wakeups

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"

	xtrace "golang.org/x/exp/trace"
)

var showSites = flag.Int("wakeups.sites", 0, "log the N most frequent goroutine wake-up sites of each traced pass (0: 12 with -test.v, else none)")

// Wakeups are the goroutine wake-ups of this process during a traced pass
// (Trace), its runtime's own goroutines (GC workers, sweeper, scavenger,
// the tracer's reader, finalizers) left out.
type Wakeups struct {
	// Unblocks are goroutines made runnable after they blocked (the
	// tracer's Waiting to Runnable transitions): HandOffs by another
	// goroutine (channel, mutex, sync.Cond, an unparked select), the
	// rest (Unblocks-HandOffs) by the runtime: the network poller
	// finding a socket ready, a timer.
	Unblocks, HandOffs int
	// SyscallWakes are goroutines whose system call blocked long enough
	// that the runtime gave their P to another thread (Syscall to
	// Runnable): a thread that slept in the kernel (a read of /dev/fuse)
	// and woke without a P to run on.
	SyscallWakes int
	// Sites are the wake-ups grouped by who woke whom, most frequent
	// first.
	Sites []Site
}

// Site is one kind of wake-up: the code that woke a goroutine (Waker; "by
// the runtime" when no goroutine did), the code where it waited (Wakee)
// and why it waited (Reason, the tracer's: "chan receive", "select",
// "sync", "network", ...).
type Site struct {
	Waker, Wakee, Reason string
	N                    int
	// Delay is the time these wake-ups waited, in total, between being
	// made runnable and running (the scheduler's latency: a thread to
	// wake, a P to get).
	Delay time.Duration
}

// Trace runs f with the Go execution tracer on and counts its wake-ups.
// It fails when tracing is already on (go test -trace).
func Trace(f func()) (Wakeups, error) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		return Wakeups{}, fmt.Errorf("runtime/trace: %w", err)
	}
	f()
	trace.Stop()
	return analyze(&buf)
}

// goInfo is what the analysis knows of one goroutine.
type goInfo struct {
	site, reason string // where and why it last blocked
	syscall      string // where it last entered a system call
	internal     bool   // one of the runtime's own goroutines
	woken        Site   // the site of its last wake-up, until it runs
	wokenAt      xtrace.Time
}

func analyze(r io.Reader) (Wakeups, error) {
	rd, err := xtrace.NewReader(r)
	if err != nil {
		return Wakeups{}, fmt.Errorf("trace: %w", err)
	}
	gs := map[xtrace.GoID]*goInfo{}
	info := func(id xtrace.GoID) *goInfo {
		g := gs[id]
		if g == nil {
			g = &goInfo{}
			gs[id] = g
		}
		return g
	}
	var w Wakeups
	sites := map[Site]int{}
	delays := map[Site]time.Duration{}
	for {
		ev, err := rd.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Wakeups{}, fmt.Errorf("trace: %w", err)
		}
		if ev.Kind() != xtrace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != xtrace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		stk := st.Stack
		if stk == xtrace.NoStack {
			stk = ev.Stack()
		}
		switch {
		case from == xtrace.GoNotExist && to == xtrace.GoRunnable:
			// created: its start function tells a runtime goroutine
			g := info(id)
			g.internal = isInternal(stk)
		case to == xtrace.GoWaiting:
			// blocked (from Running), or found blocked at the trace's
			// start (from Undetermined)
			g := info(id)
			g.site, g.reason = siteName(stk), st.Reason
			g.internal = g.internal || isInternal(stk)
		case from == xtrace.GoWaiting && to == xtrace.GoRunnable:
			g := info(id)
			if g.internal {
				continue
			}
			waker := "by the runtime"
			if ev.Goroutine() != xtrace.NoGoroutine {
				if wg := gs[ev.Goroutine()]; wg != nil && wg.internal || isInternal(ev.Stack()) {
					continue
				}
				waker = siteName(ev.Stack())
				w.HandOffs++
			}
			w.Unblocks++
			g.woken, g.wokenAt = Site{Waker: waker, Wakee: g.site, Reason: g.reason}, ev.Time()
			sites[g.woken]++
		case from == xtrace.GoRunnable && to == xtrace.GoRunning:
			if g := gs[id]; g != nil && g.wokenAt != 0 {
				delays[g.woken] += time.Duration(ev.Time() - g.wokenAt)
				g.wokenAt = 0
			}
		case from == xtrace.GoRunning && to == xtrace.GoSyscall:
			info(id).syscall = siteName(stk)
		case from == xtrace.GoSyscall && to == xtrace.GoRunnable:
			if g := info(id); !g.internal {
				w.SyscallWakes++
				g.woken, g.wokenAt = Site{Waker: "syscall return without a P", Wakee: g.syscall, Reason: "syscall"}, ev.Time()
				sites[g.woken]++
			}
		}
	}
	for s, n := range sites {
		s.N, s.Delay = n, delays[s]
		w.Sites = append(w.Sites, s)
	}
	slices.SortFunc(w.Sites, func(a, b Site) int {
		if c := cmp.Compare(b.N, a.N); c != 0 {
			return c
		}
		return cmp.Compare(a.Waker+a.Wakee, b.Waker+b.Wakee)
	})
	return w, nil
}

// internalFuncs are the start functions of the runtime's own goroutines.
var internalFuncs = []string{
	"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.forcegchelper",
	"runtime.runfinq", "runtime.runCleanups", "runtime.unique_runtime_registerUniqueMapCleanup",
	"runtime/trace.", "runtime.ReadTrace", "runtime.traceAdvance", "runtime.(*traceAdvancerState)",
}

func isInternal(s xtrace.Stack) bool {
	for f := range s.Frames() {
		for _, p := range internalFuncs {
			if strings.HasPrefix(f.Func, p) {
				return true
			}
		}
	}
	return false
}

// plumbing are the packages whose frames a site's name skips: the
// runtime's and the standard library's blocking and I/O layers.
var plumbing = []string{
	"runtime.", "internal/", "sync.", "sync/", "syscall.", "net.", "os.", "io.", "bufio.",
	"context.", "time.", "crypto/", "golang.org/x/sys/", "iter.", "github.com/nfsrdma/nfsrdma-csi/pkg/xdr.",
}

// trimmed are prefixes dropped from a site's name.
var trimmed = []string{"github.com/nfsrdma/nfsrdma-csi/pkg/", "github.com/nfsrdma/nfsrdma-csi/", "github.com/hanwen/go-fuse/v2/"}

// siteName names a stack by its innermost frame outside plumbing (its
// innermost frame if all are) and, when another, its outermost one (the
// goroutine's start function, or the caller a truncated stack reached):
// "inner:line in outer".
func siteName(s xtrace.Stack) string {
	first, inner, outer := "", "", ""
	for f := range s.Frames() {
		if first == "" {
			first = f.Func
		}
		if slices.ContainsFunc(plumbing, func(p string) bool { return strings.HasPrefix(f.Func, p) }) {
			continue
		}
		name := f.Func
		for _, p := range trimmed {
			name = strings.TrimPrefix(name, p)
		}
		if inner == "" {
			inner = fmt.Sprintf("%s:%d", name, f.Line)
		}
		outer = name
	}
	switch {
	case first == "":
		return "(no stack)"
	case inner == "":
		return first
	case outer == "" || strings.HasPrefix(inner, outer+":"):
		return inner
	}
	return inner + " in " + outer
}

// Report reports the wake-ups per operation (ops of them, unit naming
// one): wakeups/UNIT, handoffs/UNIT, syscall-wakes/UNIT; and logs the most
// frequent sites (-wakeups.sites, or 12 with -test.v).
func (w Wakeups) Report(b *testing.B, ops float64, unit string) {
	if ops <= 0 {
		return
	}
	b.ReportMetric(float64(w.Unblocks)/ops, "wakeups/"+unit)
	b.ReportMetric(float64(w.HandOffs)/ops, "handoffs/"+unit)
	b.ReportMetric(float64(w.SyscallWakes)/ops, "syscall-wakes/"+unit)
	n := *showSites
	if n == 0 && testing.Verbose() {
		n = 12
	}
	if n <= 0 {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "goroutine wake-ups per %s (%.0f traced), most frequent first, with the mean µs each waited to run:\n", unit, ops)
	for _, s := range w.Sites[:min(n, len(w.Sites))] {
		fmt.Fprintf(&sb, "  %5.2f  %6.1f µs  %s  ->  %s [%s]\n", float64(s.N)/ops, float64(s.Delay.Nanoseconds())/1e3/float64(s.N), s.Waker, s.Wakee, s.Reason)
	}
	b.Log(sb.String())
}

// TracePass runs f (ops operations of unit) under Trace and reports its
// wake-ups (Report); with tracing already on it logs why and reports
// none.
func TracePass(b *testing.B, ops float64, unit string, f func()) {
	w, err := Trace(f)
	if err != nil {
		b.Logf("no wake-up counts: %v", err)
		return
	}
	w.Report(b, ops, unit)
}
