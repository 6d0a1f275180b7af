package nfs3

import (
	"io/fs"
	"testing"
	"time"
)

func TestHelpers(t *testing.T) {
	now := time.Unix(1700000000, 123456789)
	if got := TimeOf(now); got != (Time{1700000000, 123456789}) || !got.GoTime().Equal(now) {
		t.Fatal(got)
	}
	modes := map[FileType]fs.FileMode{
		TypeReg: 0, TypeDir: fs.ModeDir, TypeBlk: fs.ModeDevice, TypeChr: fs.ModeDevice | fs.ModeCharDevice,
		TypeLnk: fs.ModeSymlink, TypeSock: fs.ModeSocket, TypeFIFO: fs.ModeNamedPipe, FileType(0): 0,
	}
	for ft, m := range modes {
		if ft.FileMode() != m {
			t.Errorf("%v: %v", ft, ft.FileMode())
		}
	}
	a := Fattr{Type: TypeReg, Mode: ModeSetUID | ModeSetGID | ModeSticky | 0o751}
	if a.FileMode() != fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|0o751 {
		t.Error(a.FileMode())
	}
	for _, c := range []struct{ got, want string }{
		{TypeFIFO.String(), "NF3FIFO"}, {FileType(9).String(), "NF3TYPE(9)"},
		{FileSync.String(), "FILE_SYNC"}, {StableHow(5).String(), "STABLE_HOW(5)"},
		{Exclusive.String(), "EXCLUSIVE"}, {CreateMode(4).String(), "CREATEMODE(4)"},
		{SetToClientTime.String(), "SET_TO_CLIENT_TIME"}, {TimeHow(3).String(), "TIME_HOW(3)"},
		{OK.Error(), "NFS3_OK"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	ra := ReadArgs{Count: 10}
	if ra.MaxResultSize() != 104 || ra.MaxResultDDPSize() != 12 {
		t.Error("ReadArgs sizes")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustFH of 65 bytes did not panic")
		}
	}()
	MustFH(make([]byte, 65))
}
