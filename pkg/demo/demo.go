// Package demo runs the whole product on one machine, as `driver demo`
// does: the export server, the mounter and the CSI controller and node
// plugins in this process (the FUSE servers as `driver mount` children),
// then what Kubernetes would do through the real CSI gRPC API: create a
// volume with a quota, publish it to this node and to two "pods" (each its
// own FUSE mount, NFS connection and credit share), write random files
// through one pod's mount and verify their SHA-256 through the other's,
// show the volume's stats, take a snapshot, clone it and verify the clone,
// expand the volume, and tear everything down again, checking that no
// mount, process or volume directory is left.
//
// Every step is printed with its duration and, for the data steps, bytes
// and MiB/s; a progress bar is drawn on the data steps when the output is
// a terminal.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
)

// Defaults of Options.
const (
	DefaultSize      = 1 << 30 // bytes written through pod A and verified through pod B
	DefaultFiles     = 8
	DefaultTransport = "rdma"
	// MinSize is the smallest Size accepted, in bytes.
	MinSize = 1 << 20
	// MaxFiles bounds Files.
	MaxFiles = 1024
)

// Errors of Run and Options.Validate, for errors.Is.
var (
	// ErrUsage: an option is out of range or malformed.
	ErrUsage = errors.New("demo: bad option")
	// ErrHost: the host lacks something the demo needs (root, /dev/fuse,
	// free space, a file system with file handles).
	ErrHost = errors.New("demo: this host cannot run the demo")
	// ErrInterrupted: the context ended (Ctrl-C) before the demo did; what
	// was set up has been torn down.
	ErrInterrupted = errors.New("demo: interrupted")
	// ErrVerify: data read back differs from what was written, or
	// something that should be gone after the teardown is still there.
	ErrVerify = errors.New("demo: verification failed")
)

// Options configures Run. The zero value of a field takes its default.
type Options struct {
	// Transport of the pods' mounts: "rdma" (RPC-over-RDMA; software
	// iWARP without an RDMA NIC) or "tcp". Default "rdma".
	Transport string
	// Size is the number of bytes written through pod A's mount and read
	// back through pod B's, split evenly over Files files. Default 1 GiB,
	// at least MinSize.
	Size int64
	// Files is the number of files Size is split into (1..MaxFiles).
	// Default 8.
	Files int
	// CreditsPerPod is the RPC-over-RDMA credits each pod's mount asks for
	// (the StorageClass parameter creditsPerPod). Default
	// csi.DefaultCreditsPerPod.
	CreditsPerPod int
	// Keep leaves the mounts up after the data steps until ctx ends
	// (Ctrl-C), then tears down; the directory is kept.
	Keep bool
	// Dir is where everything lives (export, state, sockets, logs, the
	// pods' mount points). Empty: a new temporary directory. An existing
	// directory must be empty. Removed at the end unless Keep (when the
	// demo created it; otherwise only its contents are).
	Dir string
	// Exe is the driver binary the mounter runs as `driver mount` for each
	// mount. Default: this executable.
	Exe string
	// Out receives the report. Default os.Stdout.
	Out io.Writer
	// Progress draws progress bars on Out (set it when Out is a terminal).
	Progress bool
	// LogToFile sends klog's output (the services' logs) to DIR/demo.log
	// while Run runs, instead of standard error.
	LogToFile bool
}

func (o Options) withDefaults() Options {
	if o.Transport == "" {
		o.Transport = DefaultTransport
	}
	o.Transport = strings.ToLower(o.Transport)
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.Files == 0 {
		o.Files = DefaultFiles
	}
	if o.CreditsPerPod == 0 {
		o.CreditsPerPod = csi.DefaultCreditsPerPod
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	return o
}

// Validate checks the options (after defaults); errors wrap ErrUsage.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch o.Transport {
	case "rdma", "tcp":
	default:
		return fmt.Errorf("%w: --transport %q: want rdma or tcp", ErrUsage, o.Transport)
	}
	if o.Size < MinSize {
		return fmt.Errorf("%w: --size %d bytes: want at least %s", ErrUsage, o.Size, FormatBytes(MinSize))
	}
	if o.Files < 1 || o.Files > MaxFiles {
		return fmt.Errorf("%w: --files %d: want 1..%d", ErrUsage, o.Files, MaxFiles)
	}
	if o.CreditsPerPod < 1 || o.CreditsPerPod > csi.MaxCreditsPerPod {
		return fmt.Errorf("%w: --credits %d: want 1..%d", ErrUsage, o.CreditsPerPod, csi.MaxCreditsPerPod)
	}
	if o.Transport == "tcp" && o.CreditsPerPod != csi.DefaultCreditsPerPod {
		return fmt.Errorf("%w: --credits is RPC-over-RDMA flow control: it needs --transport rdma", ErrUsage)
	}
	return nil
}

// ParseSize parses a byte count: a number with an optional unit, binary
// (K, Ki, KiB, M, Mi, MiB, G, Gi, GiB, T, Ti, TiB: powers of 1024) or
// decimal (KB, MB, GB, TB: powers of 1000), case-insensitive, such as
// "64MiB", "1GiB", "1.5G" or "1048576". Errors wrap ErrUsage.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || v < 0 {
		return 0, fmt.Errorf("%w: size %q: want a number of bytes such as 64MiB or 1GiB", ErrUsage, s)
	}
	var mul float64
	switch strings.ToLower(unit) {
	case "", "b":
		mul = 1
	case "k", "ki", "kib":
		mul = 1 << 10
	case "m", "mi", "mib":
		mul = 1 << 20
	case "g", "gi", "gib":
		mul = 1 << 30
	case "t", "ti", "tib":
		mul = 1 << 40
	case "kb":
		mul = 1e3
	case "mb":
		mul = 1e6
	case "gb":
		mul = 1e9
	case "tb":
		mul = 1e12
	default:
		return 0, fmt.Errorf("%w: size %q: unknown unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", ErrUsage, s, unit)
	}
	b := v * mul
	if b > math.MaxInt64/2 || b != math.Trunc(b) {
		return 0, fmt.Errorf("%w: size %q: not a whole number of bytes below 4 EiB", ErrUsage, s)
	}
	return int64(b), nil
}

// FormatBytes formats n bytes with a binary unit: "512 B", "64.0 MiB",
// "1.00 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	i := -1
	for f >= unit && i < len(units)-1 {
		f /= unit
		i++
	}
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f %s", f, units[i])
	case f >= 10:
		return fmt.Sprintf("%.1f %s", f, units[i])
	}
	return fmt.Sprintf("%.2f %s", f, units[i])
}

// CheckHost says what this host lacks for the demo: root (mount(2) of
// FUSE file systems) and /dev/fuse. Errors wrap ErrHost and say how to
// get what is missing.
func CheckHost() error { return checkHost(os.Geteuid(), "/dev/fuse") }

func checkHost(euid int, fuseDev string) error {
	if euid != 0 {
		return fmt.Errorf("%w: driver demo needs root (it mounts FUSE file systems): run it with sudo", ErrHost)
	}
	f, err := os.OpenFile(fuseDev, os.O_RDWR, 0)
	if err != nil {
		hint := "load the module (modprobe fuse); in a container, run it with --device /dev/fuse (and --cap-add SYS_ADMIN, or --privileged)"
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s does not exist: FUSE is missing: %s", ErrHost, fuseDev, hint)
		}
		return fmt.Errorf("%w: cannot open %s (%v): %s", ErrHost, fuseDev, err, hint)
	}
	f.Close()
	return nil
}

// Run runs the demo (see the package documentation) and returns nil when
// every step passed and everything was torn down. Errors: ErrUsage,
// ErrHost (before anything is started), ErrInterrupted (ctx ended, e.g.
// Ctrl-C, other than the wait of Keep), ErrVerify, or the failing step's
// error (CSI status, file system errors). On every error what was set up
// is torn down before Run returns.
func Run(ctx context.Context, o Options) error {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	if err := CheckHost(); err != nil {
		return err
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("demo: the driver binary: %w", err)
		}
		o.Exe = exe
	}
	// A Go test binary would run its tests again as each mount's child
	// (and those tests, demos of their own): never start one.
	if strings.HasSuffix(filepath.Base(o.Exe), ".test") {
		return fmt.Errorf("%w: %s is a Go test binary, not the driver: set Options.Exe to a driver binary", ErrUsage, o.Exe)
	}
	dir, created, err := makeDir(o.Dir)
	if err != nil {
		return err
	}
	sc := &scenario{o: o, dir: dir}
	err = sc.run(ctx)
	if !o.Keep {
		if rerr := removeDir(dir, created); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// makeDir makes the demo's directory: a new temporary one when dir is
// empty, else dir (created when missing; when it exists it must be
// empty). created says whether Run owns the directory itself.
func makeDir(dir string) (string, bool, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "nfsrdma-demo-")
		if err != nil {
			return "", false, fmt.Errorf("%w: temporary directory: %v", ErrHost, err)
		}
		return d, true, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false, fmt.Errorf("%w: --dir %s: %v", ErrUsage, dir, err)
	}
	ents, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return "", false, fmt.Errorf("%w: --dir %s: %v", ErrHost, abs, err)
		}
		return abs, true, nil
	case err != nil:
		return "", false, fmt.Errorf("%w: --dir %s: %v", ErrUsage, abs, err)
	case len(ents) > 0:
		return "", false, fmt.Errorf("%w: --dir %s is not empty: give a new or empty directory", ErrUsage, abs)
	}
	return abs, false, nil
}

// removeDir removes the demo's directory (created) or its contents. It
// refuses while anything is still mounted beneath it.
func removeDir(dir string, created bool) error {
	if ms, err := mountsUnder(dir); err != nil || len(ms) > 0 {
		return fmt.Errorf("%w: not removing %s: still mounted beneath it: %v %v", ErrVerify, dir, ms, err)
	}
	if created {
		return os.RemoveAll(dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
