package testenv

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CPUTime returns the CPU time (user and system, getrusage(2)
// RUSAGE_SELF) this process has used: in a test that holds both ends of a
// connection, the work of both, and on a shared machine steadier than the
// wall time.
func CPUTime(t testing.TB) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal("getrusage:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPUPerGiB reports the CPU seconds this process has used since
// cpu0 (a CPUTime) per GiB of bytes (the bytes the benchmark moved) as
// the metric "cpu-s/GiB".
func ReportCPUPerGiB(b *testing.B, cpu0 time.Duration, bytes float64) {
	b.Helper()
	cpu := (CPUTime(b) - cpu0).Seconds()
	b.ReportMetric(cpu/(bytes/(1<<30)), "cpu-s/GiB")
}
