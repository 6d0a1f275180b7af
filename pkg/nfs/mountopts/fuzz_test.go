package mountopts

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: any option list parses to options or to an error wrapping
// ErrBadOption, never a panic; options that parse satisfy the rules Parse
// enforces, and parse the same when given again after a valid prefix.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "proto=rdma,port=20049,credits=16,rdmavers=1", "proto=tcp,nolock,actimeo=0",
		"soft,timeo=15,retrans=5,ro", "local_lock=flock,lockport=4045", "proto=rdma,rdmadev=siw,nompacrc",
		"acregmin=9,acregmax=1", "nconnect=4,proto=rdma,credits=8", "nconnect=17", "read_ahead_kb=0,rsize=65536", "vers=4", "bogus", "port=-1", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrBadOption) {
				t.Fatalf("Parse(%q): %v, not ErrBadOption", s, err)
			}
			return
		}
		if o.Vers != 3 || (o.Proto != ProtoTCP && o.Proto != ProtoRDMA) || o.ACRegMax < o.ACRegMin || o.ACDirMax < o.ACDirMin {
			t.Fatalf("Parse(%q) = %+v", s, o)
		}
		if o.NConnect < 1 || o.NConnect > MaxNConnect {
			t.Fatalf("Parse(%q) = %+v: nconnect out of range", s, o)
		}
		if o.Proto != ProtoRDMA && (o.Credits != 0 || o.RDMAVers != 0 || o.RDMADevice != "" || o.NoMPACRC) {
			t.Fatalf("Parse(%q) = %+v: RDMA options without proto=rdma", s, o)
		}
		if again, err := Parse("hard," + s); err != nil || (!strings.Contains(s, "soft") && again != o) {
			t.Fatalf("Parse(hard,%q) = %+v, %v; want %+v", s, again, err, o)
		}
	})
}

// FuzzSplitSource: a source splits into a server and an absolute export
// path, or fails with ErrBadOption.
func FuzzSplitSource(f *testing.F) {
	for _, s := range []string{"10.0.0.1:/vol", "[::1]:/x", "host:/", "host", ":/x", "[::1/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		server, export, err := SplitSource(s)
		if err != nil {
			if !errors.Is(err, ErrBadOption) {
				t.Fatalf("SplitSource(%q): %v", s, err)
			}
			return
		}
		if server == "" || !strings.HasPrefix(export, "/") {
			t.Fatalf("SplitSource(%q) = %q, %q", s, server, export)
		}
	})
}
