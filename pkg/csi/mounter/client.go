package mounter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Client calls a mounter on its socket.
type Client struct {
	// Socket is the path of the mounter's unix socket.
	Socket string
}

// Mount hands fuse (an open /dev/fuse already mounted on m.Target) to the
// mounter and waits until the serving process has mounted the NFS export
// and answered FUSE INIT, or failed (an error wrapping ErrMount with the
// process's message). The caller may close fuse afterwards.
func (c *Client) Mount(ctx context.Context, m Mount, fuse *os.File) (Mount, error) {
	resp, err := c.call(ctx, Request{Op: OpMount, Mount: m}, fuse)
	if err != nil {
		return Mount{}, err
	}
	if len(resp.Mounts) != 1 {
		return Mount{}, fmt.Errorf("mounter: mount answered with %d mounts", len(resp.Mounts))
	}
	return resp.Mounts[0], nil
}

// List returns the mounts the mounter serves.
func (c *Client) List(ctx context.Context) ([]Mount, error) {
	resp, err := c.call(ctx, Request{Op: OpList}, nil)
	if err != nil {
		return nil, err
	}
	return resp.Mounts, nil
}

// Release waits up to timeout for the serving process of target to exit
// (after the caller unmounted target) and kills it if it does not; no
// error when target is not served.
func (c *Client) Release(ctx context.Context, target string, timeout time.Duration) error {
	_, err := c.call(ctx, Request{Op: OpRelease, Mount: Mount{Target: target}, TimeoutMillis: timeout.Milliseconds()}, nil)
	return err
}

// Duplicate returns a duplicate of the /dev/fuse descriptor of target's
// connection, which the mounter serves (OpDuplicate): the node plugin's
// Keeper takes its copies back with it after a restart.
func (c *Client) Duplicate(ctx context.Context, target string) (*os.File, error) {
	return c.callFile(ctx, Request{Op: OpDuplicate, Mount: Mount{Target: target}})
}

// Fetch returns a keeper's duplicate of target's connection (OpFetch, to
// the Keeper's socket); an error wrapping ErrNotKept when it holds none.
func (c *Client) Fetch(ctx context.Context, target string) (*os.File, error) {
	return c.callFile(ctx, Request{Op: OpFetch, Mount: Mount{Target: target}})
}

// Forget makes a keeper close its duplicate of target's connection
// (OpForget, to the Keeper's socket).
func (c *Client) Forget(ctx context.Context, target string) error {
	_, err := c.call(ctx, Request{Op: OpForget, Mount: Mount{Target: target}}, nil)
	return err
}

// callFile calls req, whose answer carries one fd.
func (c *Client) callFile(ctx context.Context, req Request) (*os.File, error) {
	_, files, err := c.callFiles(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	if len(files) != 1 {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("mounter: %s answered with %d fds, want 1", req.Op, len(files))
	}
	return files[0], nil
}

func (c *Client) call(ctx context.Context, req Request, fd *os.File) (Response, error) {
	resp, files, err := c.callFiles(ctx, req, fd)
	for _, f := range files {
		f.Close()
	}
	return resp, err
}

// callFiles calls req, sending fd with it (when not nil), and returns the
// answer and the fds it carried (closed on error).
func (c *Client) callFiles(ctx context.Context, req Request, fd *os.File) (_ Response, _ []*os.File, err error) {
	var got []*os.File // what the answer carried
	defer func() {
		if err != nil {
			for _, f := range got {
				f.Close()
			}
		}
	}()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixpacket", c.Socket)
	if err != nil {
		return Response{}, nil, fmt.Errorf("mounter: %w", err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return Response{}, nil, err
	}
	if len(b) > MaxMessage {
		return Response{}, nil, fmt.Errorf("mounter: request of %d bytes exceeds %d", len(b), MaxMessage)
	}
	var rights []byte
	if fd != nil {
		rights = unix.UnixRights(int(fd.Fd()))
	}
	if _, _, err := uc.WriteMsgUnix(b, rights, nil); err != nil {
		return Response{}, nil, fmt.Errorf("mounter: send: %w", err)
	}
	// one message, or for a long list several, then the end of the
	// connection
	var resp Response
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	for msgs := 0; ; msgs++ {
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			got = append(got, receivedFiles(oob[:oobn])...)
		}
		if errors.Is(err, io.EOF) && msgs > 0 {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return Response{}, nil, fmt.Errorf("mounter: %w", ctx.Err())
			}
			if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
				return Response{}, nil, fmt.Errorf("mounter: %w", context.DeadlineExceeded)
			}
			return Response{}, nil, fmt.Errorf("mounter: receive: %w", err)
		}
		if n > MaxMessage {
			return Response{}, nil, fmt.Errorf("mounter: response exceeds %d bytes", MaxMessage)
		}
		var r Response
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			return Response{}, nil, fmt.Errorf("mounter: bad response: %w", err)
		}
		if r.Error != "" && resp.Error == "" {
			resp.Error = r.Error
		}
		resp.Mounts = append(resp.Mounts, r.Mounts...)
	}
	if resp.Error != "" {
		if msg, ok := strings.CutPrefix(resp.Error, ErrMount.Error()+": "); ok {
			return resp, got, mountError(msg)
		}
		if strings.HasSuffix(resp.Error, ErrNotKept.Error()) {
			return resp, got, fmt.Errorf("mounter: %s: %w", req.Mount.Target, ErrNotKept)
		}
		return resp, got, fmt.Errorf("mounter: %s", resp.Error)
	}
	return resp, got, nil
}

// goneStatuses are the RFC 1813 statuses with which a serving process
// reports that the exported path or its file handle does not exist (the
// volume's directory was removed on the server): NFS3ERR_STALE,
// NFS3ERR_NOENT, and MNT3ERR_NOENT (matched as nfs3.ErrNoEnt).
var goneStatuses = []struct {
	name string
	err  error
}{
	{"NFS3ERR_STALE", nfs3.ErrStale}, {"NFS3ERR_NOENT", nfs3.ErrNoEnt}, {"MNT3ERR_NOENT", nfs3.ErrNoEnt},
}

// mountFailure is a failed mount as the serving process reported it: its
// text, and the NFS status it names, if any (nil otherwise).
type mountFailure struct {
	msg    string
	status error
}

func (e *mountFailure) Error() string { return ErrMount.Error() + ": " + e.msg }

// Unwrap gives ErrMount and the NFS status, so that errors.Is(err,
// nfs3.ErrStale) holds for a mount refused with NFS3ERR_STALE.
func (e *mountFailure) Unwrap() []error {
	if e.status == nil {
		return []error{ErrMount}
	}
	return []error{ErrMount, e.status}
}

// mountError returns the error for a mount that failed with message msg
// (the text after ErrMount's): it wraps ErrMount and, when msg names one of
// goneStatuses ("NFS3ERR_STALE: ..."), that status.
func mountError(msg string) error {
	e := &mountFailure{msg: msg}
	for _, g := range goneStatuses {
		if strings.Contains(msg, g.name+":") {
			e.status = g.err
			break
		}
	}
	return e
}
