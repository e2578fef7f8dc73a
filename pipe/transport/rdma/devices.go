package rdma

/*
#include <stdlib.h>
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// SysfsRoot is where the kernel lists its RDMA devices.
const SysfsRoot = "/sys/class/infiniband"

// Device is an RDMA device as the kernel and libibverbs describe it, for
// diagnostics (rdmasend --check).
type Device struct {
	Name string
	// Transport is "InfiniBand", "RoCE" or "iWARP" (from the node type and
	// the ports' link layer).
	Transport string
	Ports     []Port
}

// Port is one port of a Device.
type Port struct {
	Num       int
	State     string // e.g. "ACTIVE", "DOWN"
	PhysState string // e.g. "LinkUp", "Disabled"
	LinkLayer string // "InfiniBand" or "Ethernet"
	Rate      string // e.g. "100 Gb/sec (4X EDR)"
	// ActiveMTU and MaxMTU are in bytes (ibv_query_port); 0 when MTUErr
	// says why they are unknown.
	ActiveMTU, MaxMTU int
	MTUErr            error
	GIDs              []GID // the valid (non-zero) entries of the GID table
}

// Gbps is the port's rate in Gb/s, 0 if its sysfs rate does not say.
func (p Port) Gbps() float64 { return linkGbps(p.Rate) }

// GID is one valid entry of a port's GID table.
type GID struct {
	Index  int
	GID    netip.Addr
	Type   string // "IB/RoCE v1" or "RoCE v2" (RoCE), "" where the kernel does not say
	NetDev string // the network interface of a RoCE GID
}

// Active reports whether the port's logical state is ACTIVE.
func (p Port) Active() bool { return p.State == "ACTIVE" }

// Devices lists the RDMA devices of this host from sysfs, with each port's
// active MTU from libibverbs. No device is not an error: the list is empty.
func Devices() ([]Device, error) {
	return devicesAt(SysfsRoot, portMTU)
}

// devicesAt reads the devices under root; mtu queries a port's MTUs.
func devicesAt(root string, mtu func(dev string, port int) (int, int, error)) ([]Device, error) {
	ents, err := os.ReadDir(root)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	var devs []Device
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		d := Device{Name: e.Name()}
		ports, _ := os.ReadDir(filepath.Join(dir, "ports"))
		for _, pe := range ports {
			n, err := strconv.Atoi(pe.Name())
			if err != nil {
				continue
			}
			p := readPort(filepath.Join(dir, "ports", pe.Name()), n)
			p.ActiveMTU, p.MaxMTU, p.MTUErr = mtu(d.Name, n)
			d.Ports = append(d.Ports, p)
		}
		sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Num < d.Ports[j].Num })
		d.Transport = transportOf(sysfsValue(filepath.Join(dir, "node_type")), d.Ports)
		devs = append(devs, d)
	}
	return devs, nil
}

// readPort reads one port's directory in sysfs.
func readPort(dir string, n int) Port {
	p := Port{
		Num:       n,
		State:     sysfsValue(filepath.Join(dir, "state")),
		PhysState: sysfsValue(filepath.Join(dir, "phys_state")),
		LinkLayer: readString(filepath.Join(dir, "link_layer")),
		Rate:      readString(filepath.Join(dir, "rate")),
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "gids"))
	for _, e := range ents {
		i, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		g, err := netip.ParseAddr(readString(filepath.Join(dir, "gids", e.Name())))
		if err != nil || g.IsUnspecified() {
			continue
		}
		p.GIDs = append(p.GIDs, GID{Index: i, GID: g,
			Type:   readString(filepath.Join(dir, "gid_attrs", "types", e.Name())),
			NetDev: readString(filepath.Join(dir, "gid_attrs", "ndevs", e.Name()))})
	}
	sort.Slice(p.GIDs, func(i, j int) bool { return p.GIDs[i].Index < p.GIDs[j].Index })
	return p
}

// transportOf names a device's transport from its node type ("4: RNIC" is
// iWARP) and its ports' link layer.
func transportOf(nodeType string, ports []Port) string {
	if nodeType == "RNIC" {
		return "iWARP"
	}
	for _, p := range ports {
		if p.LinkLayer == "Ethernet" {
			return "RoCE"
		}
	}
	return "InfiniBand"
}

// readString returns a sysfs file's content without the newline, or ""
// when it cannot be read (an unused GID's attributes fail with EINVAL).
func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// sysfsValue returns the name in a "4: ACTIVE" style sysfs file.
func sysfsValue(path string) string {
	s := readString(path)
	if _, name, ok := strings.Cut(s, ": "); ok {
		return name
	}
	return s
}

// portMTU returns the active and largest MTU of a device's port.
func portMTU(dev string, port int) (int, int, error) {
	if err := load(); err != nil {
		return 0, 0, err
	}
	name := C.CString(dev)
	defer C.free(unsafe.Pointer(name))
	var active, maxMTU C.int
	if rc := C.rp_port_mtu(name, C.int(port), &active, &maxMTU); rc != 0 {
		return 0, 0, fmt.Errorf("ibv_query_port %s port %d: %w", dev, port, errno(rc))
	}
	return int(active), int(maxMTU), nil
}
