package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// maxAdminBody bounds the JSON body of an admin request, in bytes.
const maxAdminBody = 1 << 20

// ErrNoAdminToken: AdminHandler was given an empty token.
var ErrNoAdminToken = errors.New("nfs server: the admin API needs a bearer token")

// AdminHandler returns the HTTP handler of the admin API (the protocol is
// described in package admin) over s: every request must carry
// "Authorization: Bearer " + token (compared in constant time), else 401
// Unauthenticated. Serve it on its own listener, reachable by the CSI
// controller only (never on the pod network). An empty token is
// ErrNoAdminToken.
func (s *Server) AdminHandler(token string) (http.Handler, error) {
	if token == "" {
		return nil, ErrNoAdminToken
	}
	want := sha256.Sum256([]byte(token))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.adminStatus)
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, admin.VolumeList{Volumes: s.Volumes()})
	})
	mux.HandleFunc("GET /v1/volumes/{path...}", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Volume(r.PathValue("path"))
		reply(w, r, v, err)
	})
	mux.HandleFunc("PUT /v1/volumes/{path...}", func(w http.ResponseWriter, r *http.Request) {
		var q admin.QuotaRequest
		if !readJSON(w, r, &q) {
			return
		}
		v, err := s.AddVolume(r.PathValue("path"), q.QuotaBytes, q.Meta)
		reply(w, r, v, err)
	})
	mux.HandleFunc("DELETE /v1/volumes/{path...}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, nil, s.RemoveVolume(r.PathValue("path")))
	})
	mux.HandleFunc("PUT /v1/access/{path...}", func(w http.ResponseWriter, r *http.Request) {
		var a admin.Access
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
			reply(w, r, nil, fmt.Errorf("%w: the node query parameter is missing", admin.ErrInvalid))
			return
		}
		reply(w, r, nil, s.Revoke(r.PathValue("path"), node))
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, admin.SnapshotList{Snapshots: s.Snapshots()})
	})
	mux.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		sn, err := s.Snapshot(r.PathValue("id"))
		reply(w, r, sn, err)
	})
	mux.HandleFunc("PUT /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		var q admin.SnapshotRequest
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
		var c admin.Clone
		if !readJSON(w, r, &c) {
			return
		}
		dest := r.PathValue("dest")
		if c.Dest != "" && strings.Trim(c.Dest, "/") != dest {
			reply(w, r, nil, fmt.Errorf("%w: clone destination %q in the body, %q in the URL", admin.ErrInvalid, c.Dest, dest))
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
		var c admin.Credits
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
		writeError(w, http.StatusNotFound, admin.CodeNotFound, fmt.Sprintf("no such admin API call: %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			klog.V(1).InfoS("nfs server: admin request refused: bad or missing token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="nfsrdma-server"`)
			writeError(w, http.StatusUnauthorized, admin.CodeUnauthenticated, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// Status returns what the admin API's status reports: version, root,
// number of volumes, and the root file system's size and the bytes
// available in it (statfs(2)).
func (s *Server) Status() (admin.Status, error) {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(s.rootFD, &sf); err != nil {
		return admin.Status{}, fmt.Errorf("nfs server: statfs of the root: %w", err)
	}
	s.tmu.Lock()
	n := len(s.reg.vols)
	s.tmu.Unlock()
	return admin.Status{
		Version: s.version, Root: s.root, Volumes: n,
		CapacityBytes: int64(sf.Blocks) * sf.Bsize, FreeBytes: int64(sf.Bavail) * sf.Bsize,
	}, nil
}

func (s *Server) adminStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.Status()
	reply(w, r, st, err)
}

// readJSON decodes the request body (at most maxAdminBody bytes, one JSON
// value) into v, or answers 400 and returns false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	err := dec.Decode(v)
	if err == nil {
		if _, e := dec.Token(); e != io.EOF {
			err = errors.New("data after the JSON value")
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, admin.CodeInvalidArgument, "bad JSON body: "+err.Error())
		return false
	}
	return true
}

// reply writes v as JSON (nothing for nil), or err as an error answer.
func reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		code, status := admin.CodeOf(err)
		if status == http.StatusInternalServerError {
			klog.ErrorS(err, "nfs server: admin request failed", "method", r.Method, "path", r.URL.Path)
		} else {
			klog.V(2).InfoS("nfs server: admin request refused", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
		}
		writeError(w, status, code, err.Error())
		return
	}
	klog.V(4).InfoS("nfs server: admin request", "method", r.Method, "path", r.URL.Path)
	if v == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, v)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.V(2).InfoS("nfs server: writing an admin answer", "err", err)
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(admin.ErrorBody{Error: msg, Code: code})
}
