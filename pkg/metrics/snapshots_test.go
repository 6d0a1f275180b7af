package metrics_test

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/counters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics/fusecounters"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// fill sets every integer leaf field of the struct v points to (nested
// structs included, skip excepted) to a distinct value 1, 2, ..., every
// bool to true and every string to its name; it returns the leaves by
// path ("Write.ResentBytes").
func fill(t *testing.T, v any, skip ...string) map[string]reflect.Value {
	t.Helper()
	leaves := map[string]reflect.Value{}
	n := 0
	var walk func(s reflect.Value, prefix string)
	walk = func(s reflect.Value, prefix string) {
		for i := range s.NumField() {
			f, name := s.Field(i), prefix+s.Type().Field(i).Name
			if slices.Contains(skip, name) {
				continue
			}
			n++
			switch f.Kind() {
			case reflect.Int, reflect.Int64:
				f.SetInt(int64(n))
			case reflect.Uint64:
				f.SetUint(uint64(n))
			case reflect.Bool:
				f.SetBool(true)
			case reflect.String:
				f.SetString(name)
			case reflect.Struct:
				walk(f, name+".")
				continue
			default:
				t.Fatalf("field %s of kind %s: no series for it, or add it to skip", name, f.Kind())
			}
			leaves[name] = f
		}
	}
	walk(reflect.ValueOf(v).Elem(), "")
	return leaves
}

// gathered is what reg exports, one line a series, in order.
func gathered(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, p := range m.GetLabel() {
				ls = append(ls, p.GetName()+"="+p.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			lines = append(lines, fmt.Sprintf("%s{%s} %v", f.GetName(), strings.Join(ls, ","), v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// Every field of each counting package's snapshot type reaches a series
// of its collector: setting that field alone changes what a scrape
// gathers. A field added to one of these types without its line in the
// collector fails here (the ones listed are not exported: Continued is in
// calls_total already; a connection's verbs parameters and a ring's
// geometry are not metrics; the transport's name is checked in
// TestFUSETransportCollector).
func TestSnapshotFieldsExported(t *testing.T) {
	var (
		transport rpcrdma.Metrics
		conn      rpcrdma.ConnInfo
		drc       nfsserver.DRCStats
		rmap      nfsserver.ReadMapStats
		files     nfsserver.FileCacheStats
		mem       fusefs.MemoryStats
		fuse      fuseuring.Stats
	)
	for _, c := range []struct {
		name      string
		snap      any // pointer to the snapshot the collector reads
		skip      []string
		collector prometheus.Collector
	}{
		{"rpcrdma.Metrics", &transport, []string{"Continued", "Errors2"},
			counters.NewTransportCollector(counters.RoleRequester, func() rpcrdma.Metrics { return transport }, nil)},
		{"rpcrdma.ConnInfo", &conn, []string{"Verbs"},
			counters.NewConnectionCollector(func() []rpcrdma.ConnInfo { return []rpcrdma.ConnInfo{conn} })},
		{"server.DRCStats", &drc, nil, counters.NewDRCCollector(func() nfsserver.DRCStats { return drc })},
		{"server.ReadMapStats", &rmap, nil, counters.NewReadMapCollector(func() nfsserver.ReadMapStats { return rmap })},
		{"server.FileCacheStats", &files, nil, counters.NewFileCacheCollector(func() nfsserver.FileCacheStats { return files })},
		{"fusefs.MemoryStats", &mem, nil, fusecounters.NewMountMemoryCollector(func() fusefs.MemoryStats { return mem }, nil)},
		{"fuseuring.Stats", &fuse, []string{"Transport", "Queues", "Entries"},
			fusecounters.NewFUSETransportCollector(func() fuseuring.Stats { return fuse }, nil)},
	} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c.collector)
		snap := reflect.ValueOf(c.snap).Elem()
		leaves := fill(t, c.snap, c.skip...)
		if len(leaves) == 0 {
			t.Fatalf("%s: no field", c.name)
		}
		for name, f := range leaves {
			zero := reflect.New(snap.Type()).Elem()
			snap.Set(zero)
			base := gathered(t, reg)
			fill(t, c.snap, c.skip...)
			keep := reflect.ValueOf(f.Interface())
			snap.Set(zero)
			fieldByPath(snap, name).Set(keep)
			if gathered(t, reg) == base {
				t.Errorf("%s.%s: no series changes with it", c.name, name)
			}
		}
	}
}

func fieldByPath(v reflect.Value, path string) reflect.Value {
	for _, p := range strings.Split(path, ".") {
		v = v.FieldByName(p)
	}
	return v
}

// series is a series of a collector and the snapshot field it exports.
type series struct {
	name   string
	labels map[string]string
	field  string
}

// checkSeries scrapes reg over HTTP and checks that each series has the
// value of its field in snap, and that reg exports no other nfsrdma_
// series than these and extra.
func checkSeries(t *testing.T, reg *prometheus.Registry, snap any, want []series, extra int) {
	t.Helper()
	fams := metrics.Scrape(t, nil, metrics.ServeReg(t, reg)+"/metrics")
	s := reflect.ValueOf(snap)
	for _, w := range want {
		f := fieldByPath(s, w.field)
		var v float64
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			v = float64(f.Int())
		case reflect.Uint64:
			v = float64(f.Uint())
		}
		if got := metrics.MustValue(t, fams, w.name, w.labels); got != v {
			t.Errorf("%s%v = %v, want %s = %v", w.name, w.labels, got, w.field, v)
		}
	}
	n := 0
	for name, f := range fams {
		if strings.HasPrefix(name, metrics.Namespace+"_") {
			n += len(f.GetMetric())
		}
	}
	if n != len(want)+extra {
		t.Errorf("%d series exported, want %d: %s", n, len(want)+extra, metrics.Names(fams))
	}
}

// Each series of the RPC-over-RDMA transport collector carries its
// rpcrdma.Metrics field; RDMA2_ERROR codes are exported by name, but
// RDMA2_ERR_VERS, counted in ErrVers, is not exported apart.
func TestTransportCollectorSeries(t *testing.T) {
	var m rpcrdma.Metrics
	fill(t, &m, "Errors2")
	m.Errors2 = map[rpcrdma.Errcode2]uint64{rpcrdma.Err2Vers: 1000, rpcrdma.Err2BadXDR: 2000}
	reg := prometheus.NewRegistry()
	reg.MustRegister(counters.NewTransportCollector(counters.RoleResponder, func() rpcrdma.Metrics { return m }, prometheus.Labels{"pod": "p"}))
	l := func(kv ...string) map[string]string {
		return metrics.L(append([]string{"role", "responder", "pod", "p"}, kv...)...)
	}
	r := func(name string) string { return "nfsrdma_rpcrdma_" + name }
	checkSeries(t, reg, m, []series{
		{r("connections"), l(), "Connections"},
		{r("calls_total"), l(), "Calls"},
		{r("replies_total"), l(), "Replies"},
		{r("retransmits_total"), l(), "Retransmits"},
		{r("dropped_replies_total"), l("reason", "unmatched"), "UnmatchedReplies"},
		{r("dropped_replies_total"), l("reason", "bad"), "BadReplies"},
		{r("credits_granted"), l(), "CreditsGranted"},
		{r("credits_in_use"), l(), "CreditsInUse"},
		{r("chunks_total"), l("kind", "inline"), "InlineMsgs"},
		{r("chunks_total"), l("kind", "read"), "ReadChunks"},
		{r("chunks_total"), l("kind", "position_zero"), "PositionZeroChunks"},
		{r("chunks_total"), l("kind", "write"), "WriteChunks"},
		{r("chunks_total"), l("kind", "reply"), "ReplyChunks"},
		{r("chunks_total"), l("kind", "reply_read"), "ReplyReadChunks"},
		{r("chunks_total"), l("kind", "send_ddp"), "SendDDPMsgs"},
		{r("bytes_total"), l("kind", "inline"), "InlineBytes"},
		{r("bytes_total"), l("kind", "read"), "ReadChunkBytes"},
		{r("bytes_total"), l("kind", "write"), "WriteChunkBytes"},
		{r("bytes_total"), l("kind", "reply"), "ReplyChunkBytes"},
		{r("bytes_total"), l("kind", "reply_read"), "ReplyReadBytes"},
		{r("bytes_total"), l("kind", "send_ddp"), "SendDDPBytes"},
		{r("errors_total"), l("code", "ERR_VERS"), "ErrVers"},
		{r("errors_total"), l("code", "ERR_CHUNK"), "ErrChunk"},
		{r("errors_total"), l("code", "RDMA2_XMTERR"), "XmitErrors"},
		{r("send_ddp_groups_total"), l(), "SendDDPGroups"},
		{r("send_ddp_kept_total"), l(), "SendDDPKept"},
		{r("version"), l(), "Version"},
		{r("version1_fallbacks_total"), l(), "Version1Fallbacks"},
		{r("grants_total"), l(), "Grants"},
		{r("pull_done_total"), l("outcome", "matched"), "PullDone"},
		{r("pull_done_total"), l("outcome", "dropped"), "PullDoneDropped"},
		{r("read_chunk_timeouts_total"), l(), "ReadChunkTimeouts"},
		{r("send_with_invalidate_total"), l(), "SendWithInvalidate"},
		{r("registrations"), l(), "Registrations"},
		{r("registered_bytes"), l(), "RegisteredBytes"},
	}, 1)
	fams := metrics.Scrape(t, nil, metrics.ServeReg(t, reg)+"/metrics")
	if v := metrics.MustValue(t, fams, r("errors_total"), l("code", "RDMA2_ERR_BAD_XDR")); v != 2000 {
		t.Errorf("RDMA2_ERR_BAD_XDR %v, want 2000", v)
	}
	if v := metrics.Value(fams, r("errors_total"), l("code", rpcrdma.Err2Vers.String())); v >= 0 {
		t.Errorf("%s exported apart from ERR_VERS: %v", rpcrdma.Err2Vers, v)
	}
}

// Each series of a responder connection carries its rpcrdma.ConnInfo
// field, labelled with its machine, peer and version.
func TestConnectionCollectorSeries(t *testing.T) {
	var c rpcrdma.ConnInfo
	fill(t, &c, "Verbs")
	reg := prometheus.NewRegistry()
	reg.MustRegister(counters.NewConnectionCollector(func() []rpcrdma.ConnInfo { return []rpcrdma.ConnInfo{c} }))
	l := func(kv ...string) map[string]string {
		return metrics.L(append([]string{"machine", c.Machine, "peer", c.Peer, "version", strconv.Itoa(c.Version)}, kv...)...)
	}
	checkSeries(t, reg, c, []series{
		{"nfsrdma_rpcrdma_connection_credits_granted", l(), "Grant"},
		{"nfsrdma_rpcrdma_connection_credits_target", l("named", "true"), "Target"},
		{"nfsrdma_rpcrdma_connection_receives_posted", l(), "Posted"},
		{"nfsrdma_rpcrdma_connection_calls_in_process", l(), "InProcess"},
	}, 0)
}

// Each series of the export server's duplicate request cache and READ
// mappings carries its server.DRCStats or server.ReadMapStats field.
func TestServerCollectorSeries(t *testing.T) {
	var d nfsserver.DRCStats
	fill(t, &d)
	reg := prometheus.NewRegistry()
	reg.MustRegister(counters.NewDRCCollector(func() nfsserver.DRCStats { return d }))
	checkSeries(t, reg, d, []series{
		{"nfsrdma_server_drc_calls_total", metrics.L("result", "hit"), "Hits"},
		{"nfsrdma_server_drc_calls_total", metrics.L("result", "in_progress"), "InProgress"},
		{"nfsrdma_server_drc_calls_total", metrics.L("result", "miss"), "Misses"},
		{"nfsrdma_server_drc_dropped_total", metrics.L("reason", "evicted"), "Evictions"},
		{"nfsrdma_server_drc_dropped_total", metrics.L("reason", "expired"), "Expired"},
		{"nfsrdma_server_drc_entries", nil, "Entries"},
		{"nfsrdma_server_drc_bytes", nil, "Bytes"},
		{"nfsrdma_server_drc_pending", nil, "Pending"},
	}, 0)

	var m nfsserver.ReadMapStats
	fill(t, &m)
	reg = prometheus.NewRegistry()
	reg.MustRegister(counters.NewReadMapCollector(func() nfsserver.ReadMapStats { return m }))
	checkSeries(t, reg, m, []series{
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "hit"), "Hits"},
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "miss"), "Misses"},
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "copied"), "Copied"},
		{"nfsrdma_server_read_map_reads_total", metrics.L("result", "fault"), "Faults"},
		{"nfsrdma_server_read_map_evictions_total", nil, "Evictions"},
		{"nfsrdma_server_read_map_bytes", nil, "Mapped"},
		{"nfsrdma_server_read_map_limit_bytes", nil, "Limit"},
		{"nfsrdma_server_read_map_windows", nil, "Windows"},
	}, 0)
}
