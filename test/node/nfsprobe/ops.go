package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// readCount is the most bytes read asks for.
const readCount = 64 << 10

// prober makes the calls of one run and fills its Result.
type prober struct {
	o *options
	r *Result
	d dialer
}

// rpcStatus names the RPC-level refusal err carries (RFC 5531 section 9):
// ok is false when err is no answer of the server.
func rpcStatus(err error) (status string, ok bool) {
	var ae *sunrpc.AuthError
	switch {
	case errors.As(err, &ae):
		return "AUTH_ERROR " + ae.Stat.String(), true
	case errors.Is(err, sunrpc.ErrProgUnavail):
		return "PROG_UNAVAIL", true
	case errors.Is(err, sunrpc.ErrProgMismatch):
		return "PROG_MISMATCH", true
	case errors.Is(err, sunrpc.ErrProcUnavail):
		return "PROC_UNAVAIL", true
	case errors.Is(err, sunrpc.ErrGarbageArgs):
		return "GARBAGE_ARGS", true
	case errors.Is(err, sunrpc.ErrSystemErr):
		return "SYSTEM_ERR", true
	case errors.Is(err, sunrpc.ErrRPCMismatch):
		return "RPC_MISMATCH", true
	}
	return "", false
}

// call makes one call of prog/vers/proc to addr (a new connection each
// time). It returns answered: false with a nil error when the server
// refused the call at the RPC level (the Result says how), an error when
// there was no answer.
func (p *prober) call(ctx context.Context, addr string, step string, prog, vers, proc uint32,
	args func(e *xdr.Encoder), results func(d *xdr.Decoder) error) (answered bool, err error) {
	rpc, err := p.rpcClient(addr)
	if err != nil {
		return false, err
	}
	defer rpc.Close()
	ctx, cancel := context.WithTimeout(ctx, p.o.timeout)
	defer cancel()
	p.r.Step = step
	err = rpc.Call(ctx, sunrpc.CallSpec{Prog: prog, Vers: vers, Proc: proc,
		Args:    func(b *sunrpc.Builder) { args(&b.Encoder) },
		Results: func(d *xdr.Decoder, _ int) error { return results(d) },
	})
	p.r.Source = p.d.lastSource()
	if err == nil {
		return true, nil
	}
	if st, ok := rpcStatus(err); ok {
		p.r.Status, p.r.Detail = st, err.Error()
		return false, nil
	}
	return false, fmt.Errorf("%s: %w", step, err)
}

// nfsCall is call of NFS v3 procedure proc; st is the NFS status it
// answered, which the Result takes.
func (p *prober) nfsCall(ctx context.Context, addr string, proc uint32, args interface{ Encode(*xdr.Encoder) },
	results func(d *xdr.Decoder) (nfs3.Status, error)) (ok bool, err error) {
	var st nfs3.Status
	answered, err := p.call(ctx, addr, nfs3.ProcName(proc), nfs3.Program, nfs3.Version, proc, args.Encode,
		func(d *xdr.Decoder) error {
			var err error
			st, err = results(d)
			return err
		})
	if !answered || err != nil {
		return false, err
	}
	p.r.Status = st.String()
	return st == nfs3.OK, nil
}

// mount is MOUNT MNT of path.
func (p *prober) mount(ctx context.Context, addr, path string) error {
	var res mount3.MntRes
	answered, err := p.call(ctx, addr, "MNT", mount3.Program, mount3.Version, mount3.ProcMnt,
		(&mount3.MntArgs{Path: path}).Encode, res.Decode)
	if !answered || err != nil {
		return err
	}
	p.r.Status = res.Status.String()
	if res.Status == mount3.OK {
		p.r.FH = res.FH.String()
	}
	return nil
}

// lookup is NFS LOOKUP of name in dir: the handle, ok false when the
// Result has the refusal.
func (p *prober) lookup(ctx context.Context, addr string, dir nfs3.FH, name string) (nfs3.FH, bool, error) {
	var res nfs3.LookupRes
	ok, err := p.nfsCall(ctx, addr, nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: dir, Name: name}},
		func(d *xdr.Decoder) (nfs3.Status, error) { return res.Status, res.Decode(d) })
	if ok {
		p.r.FH = res.Object.String()
	}
	return res.Object, ok, err
}

func (p *prober) lookupOp(ctx context.Context, addr string, dir nfs3.FH, name string) error {
	_, _, err := p.lookup(ctx, addr, dir, name)
	return err
}

// getattr is NFS GETATTR; the detail has the type, mode, owner and size.
func (p *prober) getattr(ctx context.Context, addr string, fh nfs3.FH) error {
	var res nfs3.GetattrRes
	ok, err := p.nfsCall(ctx, addr, nfs3.ProcGetattr, &nfs3.GetattrArgs{Object: fh},
		func(d *xdr.Decoder) (nfs3.Status, error) { return res.Status, res.Decode(d) })
	if ok {
		a := res.Attr
		p.r.Detail = fmt.Sprintf("%v mode %#o uid %d gid %d size %d", a.Type, a.Mode, a.UID, a.GID, a.Size)
	}
	return err
}

// readdir is one NFS READDIR from the start of the directory.
func (p *prober) readdir(ctx context.Context, addr string, fh nfs3.FH) error {
	var res nfs3.ReaddirRes
	ok, err := p.nfsCall(ctx, addr, nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: fh, Count: 32 << 10},
		func(d *xdr.Decoder) (nfs3.Status, error) { return res.Status, res.Decode(d) })
	if ok {
		for _, e := range res.Entries {
			p.r.Entries = append(p.r.Entries, e.Name)
		}
	}
	return err
}

// resolve is fh itself without name, else LOOKUP name in fh.
func (p *prober) resolve(ctx context.Context, addr string, fh nfs3.FH, name string) (nfs3.FH, bool, error) {
	if name == "" {
		return fh, true, nil
	}
	return p.lookup(ctx, addr, fh, name)
}

// read is NFS READ of up to readCount bytes at offset 0.
func (p *prober) read(ctx context.Context, addr string, fh nfs3.FH, name string) error {
	f, ok, err := p.resolve(ctx, addr, fh, name)
	if !ok || err != nil {
		return err
	}
	var res nfs3.ReadRes
	ok, err = p.nfsCall(ctx, addr, nfs3.ProcRead, &nfs3.ReadArgs{File: f, Count: readCount},
		func(d *xdr.Decoder) (nfs3.Status, error) {
			err := res.DecodeMax(d, nil, false, readCount)
			return res.Status, err
		})
	if ok {
		p.r.Bytes = len(res.Data)
		sum := sha256.Sum256(res.Data)
		p.r.SHA256 = hex.EncodeToString(sum[:])
		p.r.Detail = fmt.Sprintf("eof %v", res.EOF)
	}
	return err
}

// write is NFS WRITE (FILE_SYNC) of --data at offset 0, after a CREATE of
// name when its LOOKUP finds nothing.
func (p *prober) write(ctx context.Context, addr string, fh nfs3.FH, name string) error {
	f, ok, err := p.resolve(ctx, addr, fh, name)
	if err != nil {
		return err
	}
	if !ok && p.r.Status == nfs3.ErrNoEnt.String() {
		var res nfs3.CreateRes
		how := nfs3.CreateHow{Mode: nfs3.Guarded, Attr: nfs3.Sattr{SetMode: true, Mode: 0o644}}
		ok, err = p.nfsCall(ctx, addr, nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: name}, How: how},
			func(d *xdr.Decoder) (nfs3.Status, error) { return res.Status, res.Decode(d) })
		if err != nil {
			return err
		}
		if ok && !res.Obj.Set {
			f, ok, err = p.lookup(ctx, addr, fh, name)
		} else {
			f = res.Obj.FH
		}
		if ok {
			p.r.FH = f.String()
		}
	}
	if !ok || err != nil {
		return err
	}
	data := []byte(p.o.data)
	var res nfs3.WriteRes
	ok, err = p.nfsCall(ctx, addr, nfs3.ProcWrite, writeArgs{&nfs3.WriteArgs{File: f, Stable: nfs3.FileSync, Data: data}},
		func(d *xdr.Decoder) (nfs3.Status, error) { return res.Status, res.Decode(d) })
	if ok {
		p.r.Bytes = int(res.Count)
		sum := sha256.Sum256(data[:min(int(res.Count), len(data))])
		p.r.SHA256 = hex.EncodeToString(sum[:])
	}
	return err
}

// writeArgs encodes WRITE's arguments with the data inline (TCP).
type writeArgs struct{ a *nfs3.WriteArgs }

func (w writeArgs) Encode(e *xdr.Encoder) { w.a.EncodeInline(e) }

// lock is NLM LOCK (non-blocking, exclusive, the whole file) of the file
// fh or name in fh (LOOKUP on the NFS port --nfs-port of the same host);
// a lock granted is released at once (UNLOCK), which the detail tells.
func (p *prober) lock(ctx context.Context, addr string, fh nfs3.FH, name string) error {
	host, _, _ := net.SplitHostPort(addr)
	f, ok, err := p.resolve(ctx, net.JoinHostPort(host, fmt.Sprint(p.o.nfsPort)), fh, name)
	if !ok || err != nil {
		return err
	}
	cookie := make([]byte, 8)
	rand.Read(cookie)
	lk := nlm.Lock{CallerName: p.o.machine, FH: f.Bytes(), OH: []byte(fmt.Sprintf("nfsprobe.%d@%s", os.Getpid(), p.o.machine)),
		Svid: int32(os.Getpid())}
	var res nlm.Res
	answered, err := p.call(ctx, addr, "LOCK", nlm.Program, nlm.Version, nlm.ProcLock,
		(&nlm.LockArgs{Cookie: cookie, Exclusive: true, Lock: lk, State: 1}).Encode, res.Decode)
	if !answered || err != nil {
		return err
	}
	p.r.Status = res.Stat.String()
	if res.Stat != nlm.Granted {
		return nil
	}
	var ures nlm.Res
	answered, err = p.call(ctx, addr, "UNLOCK", nlm.Program, nlm.Version, nlm.ProcUnlock,
		(&nlm.UnlockArgs{Cookie: cookie, Lock: lk}).Encode, ures.Decode)
	p.r.Step = "LOCK"
	switch {
	case err != nil:
		p.r.Detail = "granted; UNLOCK: " + err.Error()
	case !answered:
		p.r.Detail = "granted; UNLOCK refused: " + p.r.Status
		p.r.Status = res.Stat.String()
	default:
		p.r.Detail = "granted; UNLOCK: " + ures.Stat.String()
	}
	return nil
}

// adminGet is an HTTP GET of url without the bearer token.
func adminGet(ctx context.Context, o *options, r *Result, url string) (Result, error) {
	p := &prober{o: o, r: r, d: dialer{source: o.source}}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return p.d.dial(ctx, addr) }}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return *r, usageError(err.Error())
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	r.Source = p.d.lastSource()
	if err != nil {
		return *r, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	r.Status = fmt.Sprintf("HTTP %d", resp.StatusCode)
	r.Detail = strings.TrimSpace(string(body))
	return *r, nil
}
