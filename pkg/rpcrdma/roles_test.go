package rpcrdma

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The package keeps the requester apart from the responder as Linux keeps
// xprtrdma apart from svcrdma: every type with methods belongs to one
// role or to neither, and no file declares methods of both roles; the
// header codec (header_*.go) declares methods of neither.
var (
	requesterTypes = []string{"Client", "ClientOptions", "ClientMetrics", "slot", "slotState", "creditWaiter",
		"VersionCache", "doneQueue", "doneMsg"}
	responderTypes = []string{"Server", "ServerOptions", "srvConn", "srvSlot", "recentXIDs", "xidKey", "connCredits",
		"exposure", "exposures", "reassembly", "group", "heldPart", "resourceError", "systemError"}
	// neutralTypes: the header codec, the plans and layouts both roles
	// compute, the counters, the completion queue drain.
	neutralTypes = []string{"Header", "Header2", "Segment", "ReadSegment", "Proc", "Errcode", "Errcode2", "Error2", "HType",
		"Limits", "listReader", "positions", "HeaderError", "Prop", "PropID", "Properties", "PrivateData",
		"SDDP", "XmitErr", "XmitErrCode", "XmsID", "RecvBufStruct", "RBSeg", "RBGroup", "ddpWindow", "recvLayout",
		"Message", "Inline", "CallKind", "ReplyKind", "CallPlan", "ReplyPlan",
		"Metrics", "metrics", "ErrorReply", "ConnInfo", "cqDrain"}
)

// roleViolations parses the Go files of files (name to source) and
// returns what breaks the rule above, one line each.
func roleViolations(t *testing.T, files map[string][]byte) []string {
	t.Helper()
	fset := token.NewFileSet()
	var bad []string
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, files[name], parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		var req, resp []string
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			typ := receiverType(fd.Recv.List[0].Type)
			m := typ + "." + fd.Name.Name
			switch {
			case slices.Contains(requesterTypes, typ):
				req = append(req, m)
			case slices.Contains(responderTypes, typ):
				resp = append(resp, m)
			case slices.Contains(neutralTypes, typ):
			default:
				bad = append(bad, name+": method "+m+" of a type of no role: add "+typ+" to requesterTypes, responderTypes or neutralTypes")
			}
		}
		if len(req) > 0 && len(resp) > 0 {
			bad = append(bad, name+": methods of the requester ("+strings.Join(req, ", ")+") and of the responder ("+strings.Join(resp, ", ")+")")
		}
		if strings.HasPrefix(filepath.Base(name), "header_") && len(req)+len(resp) > 0 {
			bad = append(bad, name+": the header codec declares methods of a role: "+strings.Join(append(req, resp...), ", "))
		}
	}
	return bad
}

func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestRoleFiles checks the package's own non-test files.
func TestRoleFiles(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = b
	}
	if len(files) < 20 {
		t.Fatalf("%d files: not the package's directory?", len(files))
	}
	for _, v := range roleViolations(t, files) {
		t.Error(v)
	}
}

// TestRoleFilesCatch: the check finds a file with methods of both roles,
// a codec file with a role's method, and a receiver of no role.
func TestRoleFilesCatch(t *testing.T) {
	files := map[string][]byte{
		"mixed.go":      []byte("package rpcrdma\nfunc (c *Client) a() {}\nfunc (s *srvSlot) b() {}\n"),
		"header_x.go":   []byte("package rpcrdma\nfunc (h *Header) a() {}\nfunc (s slot) b() {}\n"),
		"unknown.go":    []byte("package rpcrdma\nfunc (n *newType) a() {}\n"),
		"requester.go":  []byte("package rpcrdma\nfunc (c *Client) a() {}\nfunc (s *slot) b() {}\nfunc (h *Header) c() {}\n"),
		"responder.go":  []byte("package rpcrdma\nfunc (c *srvConn) a() {}\nfunc (s *Server) b() {}\nfunc (w ddpWindow) c() {}\n"),
		"header_one.go": []byte("package rpcrdma\nfunc (h *Header) a() {}\n"),
	}
	got := roleViolations(t, files)
	want := []string{"header_x.go: the header codec", "mixed.go: methods of the requester (Client.a) and of the responder (srvSlot.b)", "unknown.go: method newType.a"}
	if len(got) != len(want) {
		t.Fatalf("violations %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %q, want %q...", got[i], want[i])
		}
	}
}
