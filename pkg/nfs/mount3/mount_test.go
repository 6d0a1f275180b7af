package mount3

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func samples() []xdrtest.Sample {
	return []xdrtest.Sample{
		{Name: "mnt args", V: &MntArgs{Path: "/export/vol-1"}},
		{Name: "mnt args/max path", V: &MntArgs{Path: strings.Repeat("p", MaxPathLen)}},
		{Name: "umnt args", V: &UmntArgs{Path: "/export"}},
		{Name: "mnt res/ok", V: &MntRes{Status: OK, FH: nfs3.MustFH(bytes.Repeat([]byte{7}, 64)), AuthFlavors: []uint32{1, 6, 390003}}},
		{Name: "mnt res/ok/no flavors", V: &MntRes{Status: OK, FH: nfs3.MustFH([]byte{1})}},
		{Name: "mnt res/fail", V: &MntRes{Status: ErrAccess}},
		{Name: "dump/empty", V: &DumpRes{}},
		{Name: "dump", V: &DumpRes{Mounts: []MountEntry{{"node-a", "/export/a"}, {strings.Repeat("h", MaxNameLen), "/"}}}},
		{Name: "export/empty", V: &ExportRes{}},
		{Name: "export", V: &ExportRes{Exports: []Export{
			{Dir: "/export", Groups: []string{"10.0.0.0/8", "*.example.com"}},
			{Dir: "/pub"},
			{Dir: "/x", Groups: []string{""}},
		}}},
	}
}

func TestRoundTrip(t *testing.T) { xdrtest.RoundTrips(t, samples()) }

func TestBytes(t *testing.T) {
	r := MntRes{Status: OK, FH: nfs3.MustFH([]byte{1, 2, 3, 4, 5, 6}), AuthFlavors: []uint32{1}}
	want, _ := hex.DecodeString("00000000" + "00000006" + "0102030405060000" + "00000001" + "00000001")
	if got := xdrtest.Encode(&r); !bytes.Equal(got, want) {
		t.Fatalf("mnt res\n%s", hex.Dump(got))
	}
	ex := ExportRes{Exports: []Export{{Dir: "/e", Groups: []string{"g"}}}}
	want, _ = hex.DecodeString("00000001" + "00000002" + "2f650000" + "00000001" + "00000001" + "67000000" + "00000000" + "00000000")
	if got := xdrtest.Encode(&ex); !bytes.Equal(got, want) {
		t.Fatalf("exports\n%s", hex.Dump(got))
	}
}

func TestRejects(t *testing.T) {
	u := xdrtest.Words
	cases := []struct {
		name string
		v    Message
		in   []byte
		want error
	}{
		{"path too long", new(MntArgs), append(u(1025), make([]byte, 1028)...), xdr.ErrTooLong},
		{"fh too long", new(MntRes), append(u(0, 65), make([]byte, 68)...), xdr.ErrTooLong},
		{"too many flavors", new(MntRes), u(0, 0, 0x40000000, 1), xdr.ErrShort},
		{"hostname too long", new(DumpRes), append(u(1, 256), make([]byte, 256)...), xdr.ErrTooLong},
		{"group too long", new(ExportRes), append(u(1, 0, 1, 256), make([]byte, 256)...), xdr.ErrTooLong},
		{"bad follows", new(ExportRes), u(1, 0, 2), xdr.ErrBadBool},
	}
	for _, c := range cases {
		if err := c.v.Decode(xdr.NewDecoder(c.in)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestStatus(t *testing.T) {
	cases := []struct {
		s     Status
		name  string
		errno syscall.Errno
	}{
		{ErrPerm, "MNT3ERR_PERM", syscall.EPERM},
		{ErrNoEnt, "MNT3ERR_NOENT", syscall.ENOENT},
		{ErrIO, "MNT3ERR_IO", syscall.EIO},
		{ErrAccess, "MNT3ERR_ACCES", syscall.EACCES},
		{ErrNotDir, "MNT3ERR_NOTDIR", syscall.ENOTDIR},
		{ErrInval, "MNT3ERR_INVAL", syscall.EINVAL},
		{ErrNameTooLong, "MNT3ERR_NAMETOOLONG", syscall.ENAMETOOLONG},
		{ErrNotSupp, "MNT3ERR_NOTSUPP", syscall.EOPNOTSUPP},
		{ErrServerFault, "MNT3ERR_SERVERFAULT", syscall.EREMOTEIO},
		{Status(3), "MNT3ERR(3)", syscall.EIO},
		{Status(nfs3.ErrExist), "MNT3ERR(17)", syscall.EIO}, // an nfsstat3 that mountstat3 lacks
	}
	for _, c := range cases {
		if c.s.String() != c.name || c.s.Errno() != c.errno {
			t.Errorf("%d: %s %v", uint32(c.s), c.s, c.s.Errno())
		}
		err := fmt.Errorf("mount: %w", c.s)
		if !errors.Is(err, c.s) || !errors.Is(err, c.errno) || c.s.Err() == nil {
			t.Errorf("%s: errors.Is", c.s)
		}
	}
	if !errors.Is(ErrNoEnt, fs.ErrNotExist) || !errors.Is(ErrAccess, fs.ErrPermission) || errors.Is(ErrIO, fs.ErrNotExist) {
		t.Error("fs errors")
	}
	if OK.Err() != nil || OK.String() != "MNT3_OK" || ProcName(ProcExport) != "EXPORT" || ProcName(9) != "PROC(9)" {
		t.Error("OK / ProcName")
	}
}
