package testenv

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"k8s.io/klog/v2"
)

// CaptureKlog sends klog's output, at verbosity v, to the returned buffer
// (and nowhere else) until t ends, then back to standard error at
// verbosity 0. Every severity's line is written once per severity at or
// below it (klog's own files behaviour), so count lines by their first
// letter (I, W, E, F) rather than by occurrences.
func CaptureKlog(t testing.TB, v int) *Buffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	_ = fs.Set("v", strconv.Itoa(v))
	buf := &Buffer{}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}
