// Command nfsprobe makes single NFSv3, MOUNT v3 and NLM v4 calls over TCP,
// and admin API requests, as a client the export server does not know
// would: the node test runs it in an unprivileged pod to show each call
// refused. Each run prints one JSON line (Result) and exits 0 when the
// call got an answer, whatever its status; 2 when it got none (connection
// refused or reset, timeout); 1 for a usage error.
//
//	nfsprobe [flags] mount   HOST:PORT PATH      MOUNT MNT (PORT: MOUNT's); fh: the handle
//	nfsprobe [flags] lookup  HOST:PORT FH NAME   NFS LOOKUP (PORT: NFS over TCP's); fh: the handle
//	nfsprobe [flags] getattr HOST:PORT FH        NFS GETATTR
//	nfsprobe [flags] readdir HOST:PORT FH        NFS READDIR (one reply's entries)
//	nfsprobe [flags] read    HOST:PORT FH [NAME] NFS LOOKUP NAME in FH when given, then READ
//	nfsprobe [flags] write   HOST:PORT FH [NAME] NFS LOOKUP NAME (CREATE when missing), then WRITE
//	nfsprobe [flags] lock    HOST:PORT FH [NAME] NFS LOOKUP NAME (on --nfs-port), then NLM LOCK
//	                                             (PORT: NLM's; non-blocking, exclusive, a lock owner
//	                                             of its own; UNLOCK when granted)
//	nfsprobe [flags] admin   URL                 HTTP GET without the bearer token
//
// FH is a file handle in hex, as mount and lookup print it. Calls carry
// AUTH_SYS with --uid and --gid (0 by default) and come from --source (any
// local address by default), from a privileged port (1023 down to 665, as
// Linux's client) when the process may bind one, else from any port.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Result is the one JSON line a run prints.
type Result struct {
	Op string `json:"op"`
	// Status is the protocol's answer: a MOUNT, NFS or NLM status name
	// (MNT3ERR_ACCES, NFS3_OK, NLM4_FAILED), an RPC rejection
	// (AUTH_ERROR AUTH_TOOWEAK, PROG_UNAVAIL), "HTTP 401"; or ERROR when
	// there was no answer.
	Status string `json:"status"`
	// Step is the call that gave Status when the op makes several
	// (LOOKUP, CREATE, READ, WRITE, LOCK, UNLOCK).
	Step   string `json:"step,omitempty"`
	Detail string `json:"detail,omitempty"`
	// FH is the handle mount, lookup, read, write or lock obtained, in hex.
	FH string `json:"fh,omitempty"`
	// Bytes and SHA256 are the data read (read) or written (write).
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
	// Entries are the names readdir returned.
	Entries []string `json:"entries,omitempty"`
	// Source is the local address of the last connection made.
	Source string `json:"source,omitempty"`
}

// options are the flags.
type options struct {
	uid, gid uint32
	machine  string
	source   net.IP
	timeout  time.Duration
	nfsPort  int
	data     string
}

const usage = `usage: nfsprobe [flags] OP ARGS
  mount HOST:PORT PATH | lookup HOST:PORT FH NAME | getattr HOST:PORT FH | readdir HOST:PORT FH
  read HOST:PORT FH [NAME] | write HOST:PORT FH [NAME] | lock HOST:PORT FH [NAME] | admin URL
flags:`

func main() {
	var o options
	var uid, gid uint
	var source string
	fs := flag.NewFlagSet("nfsprobe", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, usage); fs.PrintDefaults() }
	fs.UintVar(&uid, "uid", 0, "AUTH_SYS uid of the calls")
	fs.UintVar(&gid, "gid", 0, "AUTH_SYS gid of the calls")
	host, _ := os.Hostname()
	fs.StringVar(&o.machine, "machine", host, "AUTH_SYS machine name and NLM caller name")
	fs.StringVar(&source, "source", "", "local IP address to call from (empty: any)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound of each call, retransmissions included")
	fs.IntVar(&o.nfsPort, "nfs-port", nfs3.Port, "lock: the NFS port of the LOOKUP")
	fs.StringVar(&o.data, "data", "nfsprobe was here\n", "write: the bytes written at offset 0")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(1)
	}
	o.uid, o.gid = uint32(uid), uint32(gid)
	if source != "" {
		if o.source = net.ParseIP(source); o.source == nil {
			fmt.Fprintf(os.Stderr, "nfsprobe: --source %q: not an IP address\n", source)
			os.Exit(1)
		}
	}
	args := fs.Args()
	if len(args) < 2 {
		fs.Usage()
		os.Exit(1)
	}
	r, err := run(context.Background(), &o, args[0], args[1:])
	if err != nil {
		if u, ok := err.(usageError); ok {
			fmt.Fprintf(os.Stderr, "nfsprobe: %s\n", string(u))
			fs.Usage()
			os.Exit(1)
		}
		r.Status, r.Detail = "ERROR", err.Error()
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(r)
	if err != nil {
		os.Exit(2)
	}
}

// usageError is a bad command line.
type usageError string

func (e usageError) Error() string { return string(e) }

// run runs op with args; an error is no answer (or a usage error).
func run(ctx context.Context, o *options, op string, args []string) (Result, error) {
	r := Result{Op: op}
	want := map[string][2]int{"mount": {2, 2}, "lookup": {3, 3}, "getattr": {2, 2}, "readdir": {2, 2},
		"read": {2, 3}, "write": {2, 3}, "lock": {2, 3}, "admin": {1, 1}}
	n, ok := want[op]
	if !ok {
		return r, usageError("unknown op " + op)
	}
	if len(args) < n[0] || len(args) > n[1] {
		return r, usageError(fmt.Sprintf("%s takes %d to %d arguments, got %d", op, n[0], n[1], len(args)))
	}
	if op == "admin" {
		return adminGet(ctx, o, &r, args[0])
	}
	if _, _, err := net.SplitHostPort(args[0]); err != nil {
		return r, usageError(fmt.Sprintf("%q: want HOST:PORT", args[0]))
	}
	p := &prober{o: o, r: &r, d: dialer{source: o.source}}
	if op == "mount" {
		return r, p.mount(ctx, args[0], args[1])
	}
	fh, err := parseFH(args[1])
	if err != nil {
		return r, usageError(err.Error())
	}
	name := ""
	if len(args) > 2 {
		name = args[2]
	}
	switch op {
	case "lookup":
		err = p.lookupOp(ctx, args[0], fh, name)
	case "getattr":
		err = p.getattr(ctx, args[0], fh)
	case "readdir":
		err = p.readdir(ctx, args[0], fh)
	case "read":
		err = p.read(ctx, args[0], fh, name)
	case "write":
		err = p.write(ctx, args[0], fh, name)
	case "lock":
		err = p.lock(ctx, args[0], fh, name)
	}
	return r, err
}

// parseFH parses a file handle in hex (NFS3_FHSIZE bytes at most).
func parseFH(s string) (nfs3.FH, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nfs3.FH{}, fmt.Errorf("file handle %q: %w", s, err)
	}
	return nfs3.NewFH(b)
}
