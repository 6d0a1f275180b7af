//go:build ibverbs && cgo

package devselect

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/ibverbs"
)

// hardware finds the kernel RDMA device for serverAddr: libibverbs lists
// the devices, rdma_cm says which one the route to the server uses
// (ibverbs.ResolveDevice; two devices on one interface, such as siw0 and
// rxe0 on eth0, are decided by rdma_cm as it will decide at connect), its
// port must be active; rdmamap names the interface's RDMA device for the
// log line.
func hardware(ctx context.Context, serverAddr, override string) (verbs.Device, Choice, error) {
	devs, err := ibverbs.Devices()
	if err != nil {
		return nil, Choice{Reason: "libibverbs: " + err.Error()}, err
	}
	if len(devs) == 0 {
		return nil, Choice{Reason: "libibverbs found no RDMA device"}, nil
	}
	host := serverAddr
	if h, _, err := net.SplitHostPort(serverAddr); err == nil {
		host = h
	}
	ifname := routeInterface(host)
	mapped := ""
	if ifname != "" {
		if d, err := rdmamap.GetRdmaDeviceForNetdevice(ifname); err == nil {
			mapped = d
		}
	}
	via := fmt.Sprintf("interface %s", orNone(ifname))
	if mapped != "" {
		via += ", rdmamap: " + mapped
	}
	name, rerr := ibverbs.ResolveDevice(ctx, host)
	if override != "" && override != OverrideIbverbs {
		if _, ok := find(devs, override); !ok {
			return nil, Choice{Device: override, Reason: fmt.Sprintf("no RDMA device %s (libibverbs has %s)", override, names(devs))}, fmt.Errorf("%w: %s", ErrNotFound, override)
		}
		if rerr != nil || name != override {
			r := fmt.Sprintf("%s does not reach %s: rdma_cm resolves it on %s (%s; %v)", override, host, orNone(name), via, rerr)
			return nil, Choice{Device: override, Reason: r}, fmt.Errorf("%w: %s", ErrNotFound, r)
		}
	}
	if rerr != nil {
		c := Choice{Reason: fmt.Sprintf("no RDMA device reaches %s (%s; rdma_cm: %v)", host, via, rerr)}
		return nil, c, nil
	}
	inf, _ := find(devs, name)
	if !strings.EqualFold(inf.PortState, "active") {
		return nil, Choice{Device: name, Transport: inf.Transport, Reason: fmt.Sprintf("%s reaches %s but its port is %s", name, host, inf.PortState)}, nil
	}
	d, err := ibverbs.Open(name, ibverbs.Config{})
	if err != nil {
		return nil, Choice{Device: name, Reason: "open " + name + ": " + err.Error()}, err
	}
	why := "auto"
	if override != "" {
		why = "override " + override
	}
	return d, Choice{Device: name, Transport: inf.Transport,
		Reason: fmt.Sprintf("%s: rdma_cm reaches %s through %s (%s, port %s, %s)", why, host, name, inf.Transport, strings.ToLower(inf.PortState), via)}, nil
}

func find(devs []ibverbs.Info, name string) (ibverbs.Info, bool) {
	for _, d := range devs {
		if d.Name == name {
			return d, true
		}
	}
	return ibverbs.Info{}, false
}

func names(devs []ibverbs.Info) string {
	var s []string
	for _, d := range devs {
		s = append(s, d.Name)
	}
	return strings.Join(s, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// routeInterface returns the name of the interface the kernel routes host
// through ("" when unknown): a UDP socket connected to it (no packet is
// sent) has the route's source address.
func routeInterface(host string) string {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return ""
	}
	local := c.LocalAddr().(*net.UDPAddr).IP
	c.Close()
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(local) {
				return ifc.Name
			}
		}
	}
	return ""
}
