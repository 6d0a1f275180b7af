package nsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/xdrtest"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

func samples() []xdrtest.Sample {
	my := MyID{MyName: "server", MyProg: 100021, MyVers: 4, MyProc: 16}
	return []xdrtest.Sample{
		{Name: "sm_name", V: &SMName{MonName: "node-a"}},
		{Name: "sm_name/max", V: &SMName{MonName: strings.Repeat("n", MaxStrLen)}},
		{Name: "my_id", V: &my},
		{Name: "mon_id", V: &MonID{MonName: "node-a", MyID: my}},
		{Name: "mon", V: &Mon{MonID: MonID{MonName: "10.0.0.1", MyID: my}, Priv: [16]byte{1, 15: 2}}},
		{Name: "sm_stat_res", V: &StatRes{Res: StatFail, State: 3}},
		{Name: "sm_stat", V: &Stat{State: -1}},
		{Name: "stat_chge", V: &StatChge{MonName: "node-b", State: 5}},
	}
}

func TestRoundTrip(t *testing.T) { xdrtest.RoundTrips(t, samples()) }

// TestBytes checks encodings written out by hand from the XDR of X/Open
// XNFS chapter 11.
func TestBytes(t *testing.T) {
	cases := []struct {
		name string
		v    Message
		hex  string
	}{
		{"mon", &Mon{MonID: MonID{MonName: "cli", MyID: MyID{MyName: "srv1", MyProg: 100021, MyVers: 4, MyProc: 16}}, Priv: [16]byte{0xde, 0xad, 15: 1}}, "" +
			"00000003 636c6900" + // mon_name "cli"
			"00000004 73727631" + // my_name "srv1"
			"000186b5 00000004 00000010" + // my_prog 100021, my_vers 4, my_proc 16
			"dead0000 00000000 00000000 00000001"}, // priv
		{"stat_chge", &StatChge{MonName: "node1", State: 7}, "00000005 6e6f6465 31000000 00000007"},
		{"sm_stat_res", &StatRes{Res: StatSucc, State: 1}, "00000000 00000001"},
	}
	for _, c := range cases {
		want, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		if got := xdrtest.Encode(c.v); !bytes.Equal(got, want) {
			t.Errorf("%s: encode\n%s", c.name, hex.Dump(got))
		}
		got := xdrtest.Fresh(c.v)
		if err := got.Decode(xdr.NewDecoder(want)); err != nil || !reflect.DeepEqual(got, c.v) {
			t.Errorf("%s: decode %+v %v", c.name, got, err)
		}
	}
}

func TestRejects(t *testing.T) {
	u := xdrtest.Words
	long := append(u(MaxStrLen+1), make([]byte, 1100)...)
	for _, v := range []Message{new(SMName), new(MyID), new(MonID), new(Mon), new(StatChge)} {
		if err := v.Decode(xdr.NewDecoder(long)); !errors.Is(err, xdr.ErrTooLong) {
			t.Errorf("%T: %v", v, err)
		}
	}
	if err := new(Mon).Decode(xdr.NewDecoder(u(0, 0, 1, 2, 3, 0, 0))); !errors.Is(err, xdr.ErrShort) {
		t.Errorf("short priv: %v", err)
	}
	if ProcName(ProcNotify) != "NOTIFY" || ProcName(7) != "PROC(7)" || StatFail.String() != "stat_fail" || Res(5).String() != "sm_res(5)" {
		t.Error("names")
	}
	if Program != 100024 || Version != 1 || ProcMon != 2 || ProcSimuCrash != 5 {
		t.Error("numbers")
	}
}
