package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/lograte"
)

// maxBody bounds the JSON body of an admin request, in bytes.
const maxBody = 1 << 20

// A request refused for its token is logged at most once per client
// address every refusalInterval, with the count of those left out: a
// client calling in a loop cannot flood the log. refusalClients bounds
// the addresses remembered (lograte.Limiter.MaxKeys).
const (
	refusalInterval = 10 * time.Second
	refusalClients  = 4096
)

// ErrNoToken: NewHandler was given an empty token.
var ErrNoToken = errors.New("admin: the admin API needs a bearer token")

// Service is what the admin API serves: the export server's volume
// registry (package volumes). Each method's errors wrap the sentinels of
// this package (ErrInvalid, ErrNotFound, ErrExists, ErrPrecondition), or
// are internal; the handler maps them to the answer's code (CodeOf).
type Service interface {
	Status() (Status, error)
	Volumes() []Volume
	Volume(path string) (Volume, error)
	AddVolume(path string, quotaBytes int64, meta map[string]string) (Volume, error)
	RemoveVolume(path string) error
	MakeVolumeDir(path string, mode uint32) error
	RemoveVolumeDir(path, how string) error
	Grant(path string, a Access) error
	Revoke(path, node string) error
	Snapshots() []Snapshot
	Snapshot(id string) (Snapshot, error)
	CreateSnapshot(id, source string) (Snapshot, error)
	DeleteSnapshot(id string) error
	Clone(dest string) (Clone, error)
	CreateClone(c Clone) (Clone, error)
	Credits() Credits
	SetCredits(grants map[string]int) error
}

// NewHandler returns the HTTP handler of the admin API (the protocol is
// described in the package documentation) over s: every request must carry
// "Authorization: Bearer " + token (compared in constant time), else 401
// Unauthenticated. Serve it on its own listener, reachable by the CSI
// controller only (never on the pod network). An empty token is
// ErrNoToken.
func NewHandler(s Service, token string) (http.Handler, error) {
	return NewTokenHandler(s, StaticToken(token))
}

// NewTokenHandler is NewHandler with the token of ts, asked at every
// request: a TokenFile's rotated token is required from the request after
// the change, and its previous token still accepted for RotationGrace.
// ErrNoToken when ts has no token now.
func NewTokenHandler(s Service, ts TokenSource) (http.Handler, error) {
	if _, err := tokenOf(ts); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Status()
		reply(w, r, st, err)
	})
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, VolumeList{Volumes: s.Volumes()})
	})
	mux.HandleFunc("GET /v1/volumes/{path...}", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Volume(r.PathValue("path"))
		reply(w, r, v, err)
	})
	mux.HandleFunc("PUT /v1/volumes/{path...}", func(w http.ResponseWriter, r *http.Request) {
		var q QuotaRequest
		if !readJSON(w, r, &q) {
			return
		}
		if q.Create != nil {
			if err := s.MakeVolumeDir(r.PathValue("path"), q.Create.Mode); err != nil {
				reply(w, r, nil, err)
				return
			}
		}
		v, err := s.AddVolume(r.PathValue("path"), q.QuotaBytes, q.Meta)
		reply(w, r, v, err)
	})
	mux.HandleFunc("DELETE /v1/volumes/{path...}", func(w http.ResponseWriter, r *http.Request) {
		how := r.URL.Query().Get("directory")
		switch how {
		case "":
			how = DirectoryRetain
		case DirectoryRetain, DirectoryDelete, DirectoryArchive:
		default:
			reply(w, r, nil, fmt.Errorf("%w: directory=%q: want %s, %s or %s", ErrInvalid, how, DirectoryRetain, DirectoryDelete, DirectoryArchive))
			return
		}
		if err := s.RemoveVolume(r.PathValue("path")); err != nil {
			reply(w, r, nil, err)
			return
		}
		reply(w, r, nil, s.RemoveVolumeDir(r.PathValue("path"), how))
	})
	mux.HandleFunc("PUT /v1/access/{path...}", func(w http.ResponseWriter, r *http.Request) {
		var a Access
		if !readJSON(w, r, &a) {
			return
		}
		err := s.Grant(r.PathValue("path"), a)
		if err != nil {
			reply(w, r, nil, err)
			return
		}
		v, err := s.Volume(r.PathValue("path"))
		reply(w, r, v, err)
	})
	mux.HandleFunc("DELETE /v1/access/{path...}", func(w http.ResponseWriter, r *http.Request) {
		node := r.URL.Query().Get("node")
		if node == "" {
			reply(w, r, nil, fmt.Errorf("%w: the node query parameter is missing", ErrInvalid))
			return
		}
		reply(w, r, nil, s.Revoke(r.PathValue("path"), node))
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, SnapshotList{Snapshots: s.Snapshots()})
	})
	mux.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		sn, err := s.Snapshot(r.PathValue("id"))
		reply(w, r, sn, err)
	})
	mux.HandleFunc("PUT /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		var q SnapshotRequest
		if !readJSON(w, r, &q) {
			return
		}
		sn, err := s.CreateSnapshot(r.PathValue("id"), q.Source)
		reply(w, r, sn, err)
	})
	mux.HandleFunc("DELETE /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, nil, s.DeleteSnapshot(r.PathValue("id")))
	})
	mux.HandleFunc("GET /v1/clones/{dest...}", func(w http.ResponseWriter, r *http.Request) {
		c, err := s.Clone(r.PathValue("dest"))
		reply(w, r, c, err)
	})
	mux.HandleFunc("PUT /v1/clones/{dest...}", func(w http.ResponseWriter, r *http.Request) {
		var c Clone
		if !readJSON(w, r, &c) {
			return
		}
		dest := r.PathValue("dest")
		if c.Dest != "" && strings.Trim(c.Dest, "/") != dest {
			reply(w, r, nil, fmt.Errorf("%w: clone destination %q in the body, %q in the URL", ErrInvalid, c.Dest, dest))
			return
		}
		c.Dest = dest
		out, err := s.CreateClone(c)
		reply(w, r, out, err)
	})
	mux.HandleFunc("GET /v1/credits", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.Credits())
	})
	mux.HandleFunc("PUT /v1/credits", func(w http.ResponseWriter, r *http.Request) {
		var c Credits
		if !readJSON(w, r, &c) {
			return
		}
		if err := s.SetCredits(c.Grants); err != nil {
			reply(w, r, nil, err)
			return
		}
		writeJSON(w, s.Credits())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no such admin API call: %s %s", r.Method, r.URL.Path))
	})
	// refusals are logged at most once per client address every refusalInterval
	refusals := &lograte.Limiter{Interval: refusalInterval, MaxKeys: refusalClients}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !checkToken(ts, tok) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				host = r.RemoteAddr
			}
			if ok, skipped := refusals.Allow(host); ok {
				klog.InfoS("admin: request refused: bad or missing token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
					"notLoggedSince", skipped)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="nfsrdma-server"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// readJSON decodes the request body (at most maxBody bytes, one JSON
// value) into v, or answers 400 and returns false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	err := dec.Decode(v)
	if err == nil {
		if _, e := dec.Token(); e != io.EOF {
			err = errors.New("data after the JSON value")
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, "bad JSON body: "+err.Error())
		return false
	}
	return true
}

// reply writes v as JSON (nothing for nil), or err as an error answer.
func reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		code, status := CodeOf(err)
		if status == http.StatusInternalServerError {
			klog.ErrorS(err, "admin: request failed", "method", r.Method, "path", r.URL.Path)
		} else {
			klog.V(2).InfoS("admin: request refused", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
		}
		writeError(w, status, code, err.Error())
		return
	}
	klog.V(4).InfoS("admin: request", "method", r.Method, "path", r.URL.Path)
	if v == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, v)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(2).InfoS("admin: writing an answer", "err", err)
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(ErrorBody{Error: msg, Code: code})
}
