package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestClientErrors checks that every error answer becomes the matching
// sentinel with the server's message, and that the requests carry the
// token, the escaped path and the JSON body. The real handler is tested
// in pkg/nfs/server (TestAdminAPI).
func TestClientErrors(t *testing.T) {
	var last *http.Request
	var lastBody string
	answer := func(w http.ResponseWriter, status int, body string) {
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last = r
		b := new(strings.Builder)
		if r.Body != nil {
			var v any
			if json.NewDecoder(r.Body).Decode(&v) == nil {
				j, _ := json.Marshal(v)
				b.WriteString(string(j))
			}
		}
		lastBody = b.String()
		switch r.URL.Query().Get("node") {
		case "":
		default:
			answer(w, 204, "")
			return
		}
		switch strings.TrimPrefix(r.URL.EscapedPath(), "/v1/volumes/") {
		case "nf":
			answer(w, 404, `{"error":"volume \"nf\" is not registered","code":"NotFound"}`)
		case "inv":
			answer(w, 400, `{"error":"bad","code":"InvalidArgument"}`)
		case "ex":
			answer(w, 409, `{"error":"taken","code":"AlreadyExists"}`)
		case "pre":
			answer(w, 412, `{"error":"no dir","code":"FailedPrecondition"}`)
		case "auth":
			answer(w, 401, `{"error":"token","code":"Unauthenticated"}`)
		case "int":
			answer(w, 500, `{"error":"disk full","code":"Internal"}`)
		case "plain":
			answer(w, 405, "Method Not Allowed")
		case "nocode":
			answer(w, 404, "404 page not found")
		case "garbage":
			answer(w, 200, "{not json")
		case "ns/pvc%201":
			answer(w, 200, `{"path":"ns/pvc 1","quotaBytes":5,"access":[]}`)
		default:
			answer(w, 200, `{"path":"x"}`)
		}
	}))
	defer srv.Close()
	c := NewClient(srv.URL+"/", "tok", nil)
	if c.hc.Timeout != DefaultTimeout {
		t.Fatalf("default timeout %v", c.hc.Timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		path string
		want error
		msg  string
	}{
		{"nf", ErrNotFound, `volume "nf" is not registered`},
		{"inv", ErrInvalid, "bad"},
		{"ex", ErrExists, "taken"},
		{"pre", ErrPrecondition, "no dir"},
		{"auth", ErrUnauthenticated, "token"},
		{"int", ErrInternal, "disk full"},
		{"plain", ErrInternal, "Method Not Allowed"},
		{"nocode", ErrNotFound, "404 page not found"},
		{"garbage", ErrInternal, "bad answer"},
	} {
		_, err := c.GetVolume(ctx, tc.path)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v with %q", tc.path, err, tc.want, tc.msg)
		}
		if code, status := CodeOf(err); tc.path != "plain" && tc.path != "nocode" && tc.path != "garbage" && status != map[error]int{
			ErrNotFound: 404, ErrInvalid: 400, ErrExists: 409, ErrPrecondition: 412, ErrUnauthenticated: 401, ErrInternal: 500}[tc.want] {
			t.Errorf("%s: CodeOf %s %d", tc.path, code, status)
		}
	}
	if got := last.Header.Get("Authorization"); got != "Bearer tok" {
		t.Fatalf("Authorization %q", got)
	}
	v, err := c.PutVolume(ctx, "/ns/pvc 1", 5, map[string]string{"k": "v"}, nil)
	if err != nil || v.Path != "ns/pvc 1" || v.QuotaBytes != 5 {
		t.Fatalf("PutVolume: %+v, %v", v, err)
	}
	if last.Method != "PUT" || last.URL.EscapedPath() != "/v1/volumes/ns/pvc%201" || lastBody != `{"meta":{"k":"v"},"quotaBytes":5}` {
		t.Fatalf("request %s %s %s", last.Method, last.URL.EscapedPath(), lastBody)
	}
	if err := c.Revoke(ctx, "pvc-1", "node a&b"); err != nil || last.URL.Query().Get("node") != "node a&b" || last.Method != "DELETE" {
		t.Fatalf("Revoke: %v %v", err, last.URL)
	}
	// paths the server's URL cleaning would turn into another volume
	n := last
	for _, bad := range []string{"", "/", "a/../b", "a//b", "./a", "a/."} {
		if _, err := c.GetVolume(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("path %q: %v", bad, err)
		}
		if _, err := c.CreateClone(ctx, Clone{Dest: bad, FromVolume: "x"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("clone dest %q: %v", bad, err)
		}
	}
	for _, bad := range []string{"", ".", ".."} {
		if _, err := c.GetSnapshot(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("snapshot id %q: %v", bad, err)
		}
	}
	if last != n {
		t.Fatal("a request was sent for an invalid path")
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("x: %w", ErrNotFound), CodeNotFound, 404},
		{ErrInvalid, CodeInvalidArgument, 400},
		{ErrExists, CodeAlreadyExists, 409},
		{ErrPrecondition, CodeFailedPrecondition, 412},
		{ErrUnauthenticated, CodeUnauthenticated, 401},
		{errors.New("other"), CodeInternal, 500},
	} {
		if code, status := CodeOf(tc.err); code != tc.code || status != tc.status {
			t.Errorf("%v: %s %d", tc.err, code, status)
		}
		if got := sentinel(tc.code, 0); tc.code != CodeInternal && !errors.Is(tc.err, got) {
			t.Errorf("sentinel(%s) = %v", tc.code, got)
		}
	}
}
