package deviceplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// Port is one port of an RDMA device as sysfs reports it.
type Port struct {
	// Number is the port number, from 1 (the directory name under ports/).
	Number int
	// State is the logical port state without its numeric prefix, as the
	// kernel writes it to ports/N/state ("4: ACTIVE" gives "ACTIVE"); one of
	// DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER, or "" when unreadable.
	State string
}

// Active reports whether the port can carry traffic (state ACTIVE).
func (p Port) Active() bool { return p.State == "ACTIVE" }

// Device is one RDMA device (an HCA, a RoCE or iWARP NIC, or the kernel's
// soft-iWARP/soft-RoCE device) found on the node.
type Device struct {
	// Name is the kernel's RDMA device name, e.g. "mlx5_0" or "siw0"; it is
	// unique on the node and is the device plugin's device ID.
	Name string
	// Health is true when at least one port is ACTIVE and every device node
	// in Paths exists, including the verbs node (uverbsN) and rdma_cm.
	Health bool
	// Reason says why Health is false ("no ACTIVE port", "missing
	// /dev/infiniband/uverbs0", ...); empty when healthy.
	Reason string
	// Paths are the host device nodes a container needs to use the device:
	// the verbs node (e.g. /dev/infiniband/uverbs0; absent when the kernel
	// shows none) and then the RDMA connection manager
	// (/dev/infiniband/rdma_cm), which all devices share.
	Paths []string
	// Ports are the device's ports, ordered by Number.
	Ports []Port
	// NUMANode is the NUMA node the device is attached to (sysfs
	// device/numa_node), or -1 when unknown.
	NUMANode int
}

// Discoverer lists the RDMA devices of the node. Implementations must be
// safe for use by one goroutine at a time; the Plugin calls Devices once per
// poll interval.
type Discoverer interface {
	// Devices returns the node's RDMA devices sorted by Name. A node without
	// RDMA devices (or without the infiniband sysfs class at all) yields an
	// empty list and a nil error; an error means the device list could not
	// be read and the previous state should be kept.
	Devices() ([]Device, error)
}

// SysfsDiscoverer finds RDMA devices the way the kernel lays them out in
// sysfs:
//
//	/sys/class/infiniband/<dev>               -> ../../devices/.../infiniband/<dev>
//	/sys/class/infiniband/<dev>/ports/<n>/state        "4: ACTIVE"
//	/sys/class/infiniband/<dev>/device/numa_node       "0"
//	/sys/class/infiniband_verbs/uverbs<k>/ibdev        "<dev>"
//	/dev/infiniband/uverbs<k>, /dev/infiniband/rdma_cm
//
// github.com/Mellanox/rdmamap v1.1.0 hard-codes the /sys/class and
// /dev/infiniband paths, so it can only look at the real system. When
// sysRoot is "/" the discoverer uses rdmamap for the device list, the ports
// and the character devices, and reads only what rdmamap does not offer
// (port state, NUMA node) itself. For any other sysRoot (tests, a host sysfs
// mounted elsewhere) it reads the same layout itself under sysRoot, so a
// fake tree in a temporary directory exercises the same logic.
type SysfsDiscoverer struct {
	sysRoot string
	devRoot string
}

// NewSysfsDiscoverer returns a Discoverer reading sysfs under sysRoot and
// device nodes under devRoot. sysRoot is a file system root: the class
// directories are read at <sysRoot>/sys/class/...; "/" (or "") means the
// real system and selects rdmamap. devRoot is the directory holding the
// infiniband/ device directory, "/dev" (or "") on a real system; device
// paths in Device.Paths are <devRoot>/infiniband/<node>, and as they are
// given to kubelet as host paths devRoot must be the host's /dev for a
// plugin serving a real kubelet.
func NewSysfsDiscoverer(sysRoot, devRoot string) *SysfsDiscoverer {
	if sysRoot == "" {
		sysRoot = "/"
	}
	if devRoot == "" {
		devRoot = "/dev"
	}
	return &SysfsDiscoverer{sysRoot: filepath.Clean(sysRoot), devRoot: filepath.Clean(devRoot)}
}

// useRdmamap reports whether the real /sys is read, through rdmamap.
func (d *SysfsDiscoverer) useRdmamap() bool { return d.sysRoot == "/" }

func (d *SysfsDiscoverer) classDir(parts ...string) string {
	return filepath.Join(append([]string{d.sysRoot, "sys", "class"}, parts...)...)
}

// Devices implements Discoverer.
func (d *SysfsDiscoverer) Devices() ([]Device, error) {
	names, err := d.deviceNames()
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(names))
	for _, name := range names {
		devs = append(devs, d.device(name))
	}
	return devs, nil
}

func (d *SysfsDiscoverer) deviceNames() ([]string, error) {
	var names []string
	if d.useRdmamap() {
		// rdmamap returns nil both for "no class directory" and for a
		// read error; both mean no usable device here.
		names = rdmamap.GetRdmaDeviceList()
	} else {
		entries, err := os.ReadDir(d.classDir("infiniband"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("deviceplugin: list RDMA devices: %w", err)
		}
		for _, e := range entries {
			// The kernel links each device into the class directory; a
			// plain directory (a copied tree) is accepted too.
			if e.Type()&fs.ModeSymlink != 0 || e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

func (d *SysfsDiscoverer) device(name string) Device {
	dev := Device{Name: name, NUMANode: -1}
	devDir := d.classDir("infiniband", name)
	if b, err := os.ReadFile(filepath.Join(devDir, "device", "numa_node")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			dev.NUMANode = n
		}
	}

	var portNames []string
	if d.useRdmamap() {
		portNames = rdmamap.GetPorts(name)
	} else if entries, err := os.ReadDir(filepath.Join(devDir, "ports")); err == nil {
		for _, e := range entries {
			portNames = append(portNames, e.Name())
		}
	}
	for _, pn := range portNames {
		n, err := strconv.Atoi(pn)
		if err != nil {
			continue
		}
		p := Port{Number: n}
		if b, err := os.ReadFile(filepath.Join(devDir, "ports", pn, "state")); err == nil {
			p.State = parsePortState(string(b))
		}
		dev.Ports = append(dev.Ports, p)
	}
	sort.Slice(dev.Ports, func(i, j int) bool { return dev.Ports[i].Number < dev.Ports[j].Number })

	uverbs := d.uverbsNode(name)
	if uverbs != "" {
		dev.Paths = append(dev.Paths, uverbs)
	}
	rdmaCM := filepath.Join(d.devRoot, "infiniband", "rdma_cm")
	dev.Paths = append(dev.Paths, rdmaCM)

	active := false
	for _, p := range dev.Ports {
		active = active || p.Active()
	}
	switch {
	case uverbs == "":
		dev.Reason = "no uverbs device in " + d.classDir("infiniband_verbs")
	case !active:
		dev.Reason = "no ACTIVE port"
	default:
		for _, p := range dev.Paths {
			if _, err := os.Stat(p); err != nil {
				dev.Reason = "missing " + p
				break
			}
		}
	}
	dev.Health = dev.Reason == ""
	return dev
}

// uverbsNode returns the verbs device node of the RDMA device name under
// devRoot, or "" when the kernel shows none (ib_uverbs not loaded).
func (d *SysfsDiscoverer) uverbsNode(name string) string {
	if d.useRdmamap() {
		for _, p := range rdmamap.GetRdmaCharDevices(name) {
			base := filepath.Base(p)
			if strings.HasPrefix(base, rdmamap.RdmaUverbsFilxPrefix) {
				return filepath.Join(d.devRoot, "infiniband", base)
			}
		}
		return ""
	}
	dir := d.classDir("infiniband_verbs")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		// The class directory also holds the plain file abi_version.
		if !strings.HasPrefix(e.Name(), rdmamap.RdmaUverbsFilxPrefix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "ibdev"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			return filepath.Join(d.devRoot, "infiniband", e.Name())
		}
	}
	return ""
}

// parsePortState turns the content of a sysfs port state file ("4: ACTIVE\n")
// into its name ("ACTIVE").
func parsePortState(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}
