package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// nameWidth is the width steps' names are padded to with dots.
const nameWidth = 47

// result is one finished step.
type result struct {
	name   string
	took   time.Duration
	bytes  int64 // data moved, for MiB/s; 0 for a control step
	detail string
	err    error
}

// MiBps is the step's rate in MiB/s (0 without data).
func (r result) MiBps() float64 {
	if r.bytes == 0 || r.took <= 0 {
		return 0
	}
	return float64(r.bytes) / (1 << 20) / r.took.Seconds()
}

// report prints the numbered steps as they finish and the summary.
type report struct {
	w        io.Writer
	total    int  // steps planned
	progress bool // draw progress bars (a terminal)
	n        int
	results  []result
}

// step is what a running step may report besides its detail line.
type step struct {
	r     *report
	name  string
	bytes int64
	bar   *progressbar.ProgressBar
}

// Progress starts a progress bar of total bytes (drawn only on a
// terminal) and returns the function that advances it.
func (s *step) Progress(total int64) func(n int64) {
	if !s.r.progress {
		return func(int64) {}
	}
	s.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(s.r.w),
		progressbar.OptionSetDescription(fmt.Sprintf("[%2d/%d] %s", s.r.n+1, s.r.total, s.name)),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(true),
	)
	bar := s.bar
	return func(n int64) { _ = bar.Add64(n) }
}

// Bytes records the data the step moved, for its MiB/s.
func (s *step) Bytes(n int64) { s.bytes += n }

// run runs fn as the next step: it prints "[ n/total] name ..... 1.23 s
// detail" when fn returns (with MiB/s when data moved), or the error.
func (r *report) run(name string, fn func(s *step) (string, error)) error {
	s := &step{r: r, name: name}
	start := time.Now()
	detail, err := fn(s)
	took := time.Since(start)
	if s.bar != nil {
		_ = s.bar.Clear()
	}
	r.n++
	res := result{name: name, took: took, bytes: s.bytes, detail: detail, err: err}
	r.results = append(r.results, res)
	if err != nil && errors.Is(err, context.Canceled) {
		detail = "interrupted"
	} else if err != nil {
		detail = "FAILED: " + err.Error()
	} else if res.bytes > 0 {
		detail = fmt.Sprintf("%s, %.1f MiB/s; %s", FormatBytes(res.bytes), res.MiBps(), detail)
	}
	fmt.Fprintf(r.w, "[%2d/%d] %s %s %6.2f s   %s\n", r.n, r.total, name, dots(name), took.Seconds(), detail)
	return err
}

// note prints an indented line under the steps.
func (r *report) note(format string, args ...any) {
	fmt.Fprintf(r.w, "        "+format+"\n", args...)
}

func dots(name string) string {
	n := nameWidth - len(name)
	if n < 3 {
		n = 3
	}
	return strings.Repeat(".", n)
}

// summary prints the table of steps (time, data, MiB/s), the transport
// and the total time.
func (r *report) summary(transport string, total time.Duration) {
	w := len("step")
	for _, res := range r.results {
		w = max(w, len(res.name)+len(" (failed)"))
	}
	fmt.Fprintf(r.w, "\n     %-*s %9s %10s %8s\n", w, "step", "time (s)", "data", "MiB/s")
	for i, res := range r.results {
		data, rate := "-", "-"
		if res.bytes > 0 {
			data, rate = FormatBytes(res.bytes), fmt.Sprintf("%.1f", res.MiBps())
		}
		name := res.name
		if res.err != nil {
			name += " (failed)"
		}
		fmt.Fprintf(r.w, "  %2d %-*s %9.2f %10s %8s\n", i+1, w, name, res.took.Seconds(), data, rate)
	}
	fmt.Fprintf(r.w, "\ntransport: %s\ntotal:     %.1f s\n", transport, total.Seconds())
}
