package mountopts

import (
	"errors"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	def := Default()
	with := func(f func(o *Options)) Options {
		o := def
		f(&o)
		return o
	}
	tests := []struct {
		in   string
		want Options
		bad  bool
	}{
		{in: "", want: def},
		{in: "proto=tcp,vers=3", want: def},
		{in: "proto=rdma", want: with(func(o *Options) { o.Proto, o.SendDDP = ProtoRDMA, true })},
		{in: "proto=rdma,nosddp", want: with(func(o *Options) { o.Proto = ProtoRDMA })},
		{in: "proto=rdma,rdmavers=1,sddp", want: with(func(o *Options) { o.Proto, o.RDMAVers, o.SendDDP = ProtoRDMA, 1, true })},
		{in: "nosddp", want: def},
		{in: "proto=rdma,port=20050,mountport=20048,credits=8", want: with(func(o *Options) {
			o.Proto, o.Port, o.MountPort, o.Credits, o.SendDDP = ProtoRDMA, 20050, 20048, 8, true
		})},
		{in: "proto=rdma,rdmadev=mlx5_0", want: with(func(o *Options) { o.Proto, o.RDMADevice, o.SendDDP = ProtoRDMA, "mlx5_0", true })},
		{in: "proto=rdma,rdmavers=1", want: with(func(o *Options) { o.Proto, o.RDMAVers = ProtoRDMA, 1 })},
		{in: "proto=rdma,norprc", want: with(func(o *Options) { o.Proto, o.NoRPRC, o.SendDDP = ProtoRDMA, true, true })},
		{in: "proto=rdma,norprc,rprc", want: with(func(o *Options) { o.Proto, o.SendDDP = ProtoRDMA, true })},
		{in: "proto=rdma,sddp", want: with(func(o *Options) { o.Proto, o.SendDDP = ProtoRDMA, true })},
		{in: "proto=rdma,sddp,nosddp", want: with(func(o *Options) { o.Proto = ProtoRDMA })},
		{in: "proto=rdma,sddpgroups", want: with(func(o *Options) { o.Proto, o.SendDDP, o.SendDDPGroups = ProtoRDMA, true, true })},
		{in: "proto=rdma,sddpgroups,nosddpgroups", want: with(func(o *Options) { o.Proto, o.SendDDP = ProtoRDMA, true })},
		{in: "proto=rdma,nompacrc", want: with(func(o *Options) { o.Proto, o.NoMPACRC, o.SendDDP = ProtoRDMA, true, true })},
		{in: "proto=rdma,nompacrc,mpacrc", want: with(func(o *Options) { o.Proto, o.SendDDP = ProtoRDMA, true })},
		{in: "rsize=65536,wsize=1048576", want: with(func(o *Options) { o.RSize, o.WSize = 65536, 1<<20 })},
		{in: "soft,timeo=15,retrans=5", want: with(func(o *Options) {
			o.Soft, o.Timeo, o.Retrans = true, 1500*time.Millisecond, 5
		})},
		{in: "soft,hard", want: def},
		{in: "noac", want: with(func(o *Options) { o.NoAC = true })},
		{in: "noac,ac", want: def},
		{in: "actimeo=7", want: with(func(o *Options) { o.ACRegMin, o.ACRegMax, o.ACDirMin, o.ACDirMax = 7e9, 7e9, 7e9, 7e9 })},
		{in: "acregmin=1,acregmax=2,acdirmin=4,acdirmax=8", want: with(func(o *Options) {
			o.ACRegMin, o.ACRegMax, o.ACDirMin, o.ACDirMax = 1e9, 2e9, 4e9, 8e9
		})},
		{in: "acregmin=90", want: with(func(o *Options) { o.ACRegMin, o.ACRegMax = 90e9, 90e9 })},
		{in: "ro", want: with(func(o *Options) { o.ReadOnly = true })},
		{in: "ro,rw", want: def},
		{in: " ro , ,rw ", want: def},
		{in: "nolock", want: with(func(o *Options) { o.LocalLock = LocalLockAll })},
		{in: "nolock,lock", want: def},
		{in: "local_lock=flock", want: with(func(o *Options) { o.LocalLock = LocalLockFlock })},
		{in: "local_lock=posix,lockport=4045", want: with(func(o *Options) { o.LocalLock, o.LockPort = LocalLockPosix, 4045 })},
		{in: "local_lock=all,local_lock=none", want: def},
		{in: "nconnect=4", want: with(func(o *Options) { o.NConnect = 4 })},
		{in: "proto=rdma,nconnect=16,credits=8", want: with(func(o *Options) { o.Proto, o.NConnect, o.Credits, o.SendDDP = ProtoRDMA, 16, 8, true })},
		{in: "nconnect=4,nconnect=1", want: def},
		{in: "nconnect=0", bad: true},
		{in: "nconnect=17", bad: true},
		{in: "nconnect", bad: true},
		{in: "nconnect=x", bad: true},
		{in: "fuse_uring=auto", want: with(func(o *Options) { o.FuseURing = FuseURingAuto })},
		{in: "fuse_uring=on", want: with(func(o *Options) { o.FuseURing = FuseURingOn })},
		{in: "fuse_uring=on,fuse_uring=off", want: def},
		{in: "fuse_uring=yes", bad: true},
		{in: "xprtsec=tls", want: with(func(o *Options) { o.XprtSec = XprtSecTLS })},
		{in: "proto=rdma,xprtsec=mtls", want: with(func(o *Options) { o.Proto, o.XprtSec, o.SendDDP = ProtoRDMA, XprtSecMTLS, true })},
		{in: "xprtsec=mtls,xprtsec=none", want: def},
		{in: "xprtsec=ssl", bad: true},
		{in: "xprtsec", bad: true},
		{in: "fuse_uring", bad: true},
		{in: "local_lock=fcntl", bad: true},
		{in: "local_lock", bad: true},
		{in: "nolock=1", bad: true},
		{in: "lockport=65536", bad: true},
		{in: "vers=4", bad: true},
		{in: "nfsvers=3", want: def},
		{in: "proto=udp", bad: true},
		{in: "proto", bad: true},
		{in: "port=70000", bad: true},
		{in: "port=-1", bad: true},
		{in: "rsize=0", bad: true},
		{in: "rsize=abc", bad: true},
		{in: "timeo=0", bad: true},
		{in: "ro=1", bad: true},
		{in: "credits=8", bad: true},  // needs proto=rdma
		{in: "sddpgroups", bad: true}, // needs proto=rdma
		{in: "proto=rdma,nosddp,sddpgroups", bad: true},
		{in: "rdmavers=1", bad: true},              // needs proto=rdma
		{in: "norprc", bad: true},                  // needs proto=rdma
		{in: "sddp", bad: true},                    // needs proto=rdma
		{in: "proto=rdma,sddp=1", bad: true},       // a flag
		{in: "proto=rdma,norprc=1", bad: true},     // a flag
		{in: "proto=rdma,rdmavers=3", bad: true},   // out of range
		{in: "proto=rdma,rdmavers=0", bad: true},   // out of range
		{in: "rdmadev=siw", bad: true},             // needs proto=rdma
		{in: "proto=rdma,rdmadev", bad: true},      // needs a value
		{in: "nompacrc", bad: true},                // needs proto=rdma
		{in: "proto=rdma,nompacrc=1", bad: true},   // a flag
		{in: "proto=rdma,credits=0", bad: true},    // out of range
		{in: "proto=rdma,credits=5000", bad: true}, // out of range
		{in: "read_ahead_kb=16384", want: with(func(o *Options) { o.ReadAheadKB = 16384 })},
		{in: "read_ahead_kb=0", want: with(func(o *Options) { o.ReadAheadKB = 0 })},
		{in: "read_ahead_kb=-1", bad: true},
		{in: "read_ahead_kb=70000", bad: true}, // past MaxReadAheadKB
		{in: "nolock,sec=sys", bad: true},      // unknown: not ignored
		{in: "bogus=1", bad: true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrBadOption) {
				t.Errorf("Parse(%q) = %+v, %v; want ErrBadOption", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestNFSPortAndSource(t *testing.T) {
	o, _ := Parse("proto=rdma")
	if o.NFSPort() != DefaultRDMAPort {
		t.Errorf("rdma port %d", o.NFSPort())
	}
	o, _ = Parse("proto=tcp")
	if o.NFSPort() != 0 {
		t.Errorf("tcp port %d", o.NFSPort())
	}
	for _, tt := range []struct{ in, server, export string }{
		{"10.0.0.1:/vol/a", "10.0.0.1", "/vol/a"},
		{"host:/", "host", "/"},
		{"[::1]:/x", "::1", "/x"},
	} {
		s, e, err := SplitSource(tt.in)
		if err != nil || s != tt.server || e != tt.export {
			t.Errorf("SplitSource(%q) = %q, %q, %v", tt.in, s, e, err)
		}
	}
	for _, bad := range []string{"host", ":/x", "host:x", "[::1/x", "[]:/x"} {
		if _, _, err := SplitSource(bad); !errors.Is(err, ErrBadOption) {
			t.Errorf("SplitSource(%q): %v", bad, err)
		}
	}
}
