package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds each request of a Client made with a nil
// *http.Client.
const DefaultTimeout = 30 * time.Second

// maxAnswer bounds the body of an answer read, in bytes.
const maxAnswer = 64 << 20

// Client calls the admin API of one export server. It is safe for
// concurrent use.
type Client struct {
	base   string
	tokens TokenSource
	hc     *http.Client
}

// NewClient returns a client of the server at baseURL (e.g.
// "http://10.0.0.5:20050") sending token as its bearer token. hc nil means
// an http.Client with a DefaultTimeout (30 s) timeout.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	return NewTokenClient(baseURL, StaticToken(token), hc)
}

// NewTokenClient is NewClient with the token of ts, asked at every
// request: a TokenFile's rotated token is sent from the request after the
// change; and while the server has not seen the rotation yet (it answers
// 401 to the new token), a request is sent again once with the previous
// token, for RotationGrace after the change.
func NewTokenClient(baseURL string, ts TokenSource, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), tokens: ts, hc: hc}
}

// escapePath escapes each segment of a volume path (one leading "/"
// allowed) for a URL path; ErrInvalid for an empty path or an empty, "."
// or ".." segment, which the server's URL cleaning would resolve to
// another volume.
func escapePath(p string) (string, error) {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		if s == "" || s == "." || s == ".." {
			return "", fmt.Errorf("%w: volume path %q: want a clean relative path", ErrInvalid, p)
		}
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/"), nil
}

// escapeID escapes a snapshot id for a URL path; ErrInvalid for "", "."
// or "..".
func escapeID(id string) (string, error) {
	if id == "" || id == "." || id == ".." {
		return "", fmt.Errorf("%w: snapshot id %q", ErrInvalid, id)
	}
	return url.PathEscape(id), nil
}

// volumeCall is do on prefix + the escaped volume path p + query.
func (c *Client) volumeCall(ctx context.Context, method, prefix, p, query string, in, out any) error {
	e, err := escapePath(p)
	if err != nil {
		return err
	}
	return c.do(ctx, method, prefix+e+query, in, out)
}

// snapshotCall is do on /v1/snapshots/ + the escaped id.
func (c *Client) snapshotCall(ctx context.Context, method, id string, in, out any) error {
	e, err := escapeID(id)
	if err != nil {
		return err
	}
	return c.do(ctx, method, "/v1/snapshots/"+e, in, out)
}

// do sends method on p (already escaped, with its query) with in as the
// JSON body (nil: none) and decodes the answer into out (nil: ignored).
func (c *Client) do(ctx context.Context, method, p string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("admin: %s %s: %w", method, p, err)
		}
		body = b
	}
	tok, err := tokenOf(c.tokens)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrUnauthenticated, method, p, err)
	}
	resp, err := c.send(ctx, method, p, body, tok)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		if f, ok := c.tokens.(*TokenFile); ok {
			if prev := f.previous(); prev != "" && prev != tok {
				resp.Body.Close()
				resp, err = c.send(ctx, method, p, body, prev)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("admin: %s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("admin: %s %s: reading the answer: %w", method, p, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var eb ErrorBody
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			msg = eb.Error
		}
		return fmt.Errorf("%w: %s %s: %s (HTTP %d)", sentinel(eb.Code, resp.StatusCode), method, p, msg, resp.StatusCode)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s %s: bad answer: %w", ErrInternal, method, p, err)
	}
	return nil
}

// send sends one request with bearer token tok.
func (c *Client) send(ctx context.Context, method, p string, body []byte, tok string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.hc.Do(req)
}

// Status returns the server's version, root and capacity.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
	return s, err
}

// PutVolume registers the existing directory path (relative to the server
// root) as a volume export with quotaBytes (0: unlimited), or updates the
// quota of a registered one; idempotent. Lowering the quota below the
// usage is allowed: further growth then fails. meta, when given (the
// maps are merged), replaces the volume's Meta; without it Meta is kept.
// Errors: ErrPrecondition when the directory does not exist (or is inside
// or around another volume, or is a static export), ErrInvalid for a bad
// path, a negative quota or metadata over the limits.
func (c *Client) PutVolume(ctx context.Context, path string, quotaBytes int64, meta ...map[string]string) (Volume, error) {
	req := QuotaRequest{QuotaBytes: quotaBytes}
	for _, m := range meta {
		if m == nil {
			continue
		}
		if req.Meta == nil {
			req.Meta = make(map[string]string, len(m))
		}
		for k, v := range m {
			req.Meta[k] = v
		}
	}
	var v Volume
	err := c.volumeCall(ctx, http.MethodPut, "/v1/volumes/", path, "", req, &v)
	return v, err
}

// CreateVolume makes directory path (relative to the server root) when it
// is missing, its missing parents with mode 0755, sets its mode to mode
// (permission bits, setgid, sticky), and registers it as PutVolume does;
// idempotent. Errors: those of PutVolume, and ErrPrecondition when a
// component of path is not a directory (or is a symlink or a mount point).
func (c *Client) CreateVolume(ctx context.Context, path string, quotaBytes int64, mode uint32, meta map[string]string) (Volume, error) {
	req := QuotaRequest{QuotaBytes: quotaBytes, Meta: meta, Create: &DirRequest{Mode: mode}}
	var v Volume
	err := c.volumeCall(ctx, http.MethodPut, "/v1/volumes/", path, "", req, &v)
	return v, err
}

// GetVolume returns the registered volume path with its usage; ErrNotFound
// when it is not registered.
func (c *Client) GetVolume(ctx context.Context, path string) (Volume, error) {
	var v Volume
	err := c.volumeCall(ctx, http.MethodGet, "/v1/volumes/", path, "", nil, &v)
	return v, err
}

// ListVolumes returns every registered volume, sorted by path.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var l VolumeList
	err := c.do(ctx, http.MethodGet, "/v1/volumes", nil, &l)
	return l.Volumes, err
}

// DeleteVolume unregisters volume path (its export disappears) and
// cancels a clone job filling it; then, as directory says, keeps its
// directory (DirectoryRetain, or ""), removes its tree (DirectoryDelete)
// or renames it "archived-NAME" (DirectoryArchive). Idempotent: nil when
// it is not registered and the directory is already gone. Errors:
// ErrInvalid for a bad path or directory, ErrPrecondition when the
// directory contains or lies in another volume.
func (c *Client) DeleteVolume(ctx context.Context, path string, directory ...string) error {
	q := ""
	if len(directory) > 0 && directory[0] != "" {
		q = "?directory=" + url.QueryEscape(directory[0])
	}
	return c.volumeCall(ctx, http.MethodDelete, "/v1/volumes/", path, q, nil, nil)
}

// Grant adds a.Node's entry to the client list of volume path, or
// replaces it; idempotent. It applies from the next NFS call. Errors:
// ErrNotFound for an unregistered volume, ErrInvalid for an empty node or
// an address that is not an IP address or CIDR.
func (c *Client) Grant(ctx context.Context, path string, a Access) error {
	return c.volumeCall(ctx, http.MethodPut, "/v1/access/", path, "", a, nil)
}

// Revoke removes node's entry from the client list of volume path; its
// next NFS call on the volume fails with NFS3ERR_ACCES. Idempotent: nil
// when the node has no entry; ErrNotFound for an unregistered volume.
func (c *Client) Revoke(ctx context.Context, path, node string) error {
	return c.volumeCall(ctx, http.MethodDelete, "/v1/access/", path, "?node="+url.QueryEscape(node), nil, nil)
}

// CreateSnapshot starts copying volume source into snapshot id, or
// returns the job of the same id and source (in progress, done or
// failed). Errors: ErrExists when id is taken by another source,
// ErrNotFound when source is not a registered volume, ErrInvalid for a bad
// id, ErrPrecondition when the server has no snapshot directory.
func (c *Client) CreateSnapshot(ctx context.Context, id, source string) (Snapshot, error) {
	var s Snapshot
	err := c.snapshotCall(ctx, http.MethodPut, id, SnapshotRequest{Source: source}, &s)
	return s, err
}

// GetSnapshot returns snapshot id with its progress; ErrNotFound when
// unknown.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var s Snapshot
	err := c.snapshotCall(ctx, http.MethodGet, id, nil, &s)
	return s, err
}

// ListSnapshots returns every snapshot, sorted by id.
func (c *Client) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	var l SnapshotList
	err := c.do(ctx, http.MethodGet, "/v1/snapshots", nil, &l)
	return l.Snapshots, err
}

// DeleteSnapshot cancels a running copy and removes snapshot id and its
// tree. Idempotent: nil when unknown.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.snapshotCall(ctx, http.MethodDelete, id, nil, nil)
}

// CreateClone starts filling cl.Dest (an existing directory, empty unless
// this job is filling it) from cl.FromSnapshot or cl.FromVolume (exactly
// one), or returns the job for the same destination and source. It
// registers nothing: call PutVolume for the destination. Errors:
// ErrInvalid (no or two sources, bad path), ErrNotFound (unknown
// snapshot or volume), ErrPrecondition (destination missing, not empty, or
// the snapshot not ready), ErrExists (a job from another source fills the
// destination).
func (c *Client) CreateClone(ctx context.Context, cl Clone) (Clone, error) {
	var out Clone
	err := c.volumeCall(ctx, http.MethodPut, "/v1/clones/", cl.Dest, "", cl, &out)
	return out, err
}

// GetClone returns the clone job of destination dest with its progress;
// ErrNotFound when there is none.
func (c *Client) GetClone(ctx context.Context, dest string) (Clone, error) {
	var out Clone
	err := c.volumeCall(ctx, http.MethodGet, "/v1/clones/", dest, "", nil, &out)
	return out, err
}

// SetCredits replaces the server's credit grants per AUTH_SYS machine
// name (see Credits). ErrInvalid for a grant below 1, or a machine name
// empty or longer than MaxMachineName bytes.
func (c *Client) SetCredits(ctx context.Context, grants map[string]int) error {
	if grants == nil {
		grants = map[string]int{}
	}
	return c.do(ctx, http.MethodPut, "/v1/credits", Credits{Grants: grants}, nil)
}

// GetCredits returns the server's credit grants and its RPC-over-RDMA
// connections with what each is granted.
func (c *Client) GetCredits(ctx context.Context) (Credits, error) {
	var cr Credits
	err := c.do(ctx, http.MethodGet, "/v1/credits", nil, &cr)
	return cr, err
}
