package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Several devices: Options.Device "mlx5_0,mlx5_1" or "all" stripes the
// lanes (lanes.go) over several RDMA devices on each side. rdma_cm picks a
// connection's device from the IP addresses, so each lane connects to an
// address of the receiver on one of its devices:
//
//   - The connect request sets opNICs beside opWrite, and asks for at least
//     one lane per device the sender may use.
//   - A listener bound to a wildcard address whose Options.Device lists
//     several devices or says "all" answers with its grant one address on
//     each of its other devices that it allows and whose port is active,
//     of the family of the address lane 0 reached (at most maxOffers; see
//     marshalOffers). The answer comes before the engine's handshake has
//     authenticated the sender, so a listener not set up to stripe tells
//     no peer about its other devices.
//   - The sender resolves each offered address and keeps those that
//     rdma_cm reaches from a device it allows: with lane 0's address they
//     are the lanes' destinations, lane k connecting to destination k mod
//     their number.
//
// A lane on another device than lane 0's gets that device's protection
// domain, completion queue and completion channel, with the connection's
// buffers registered there too (nic); Poll takes completions from every
// completion queue and waits on all the channels at once, through an epoll
// instance. A receiver registers its ring on each device and describes it
// with a key per lane (see ring.go). Control messages stay on lane 0.

// devices are the devices lanes use: nics those beyond lane 0's, laneNIC
// each lane's device as an index into lkeys, which holds the key of the
// connection's region on each device (bufs.lkey first).
type devices struct {
	nics    []*nic
	laneNIC []int
	lkeys   []C.uint32_t
}

// opNICs, beside opWrite in a connect request, asks a listener for its
// addresses on its other devices.
const opNICs = 2

// maxOffers bounds the addresses a listener offers, so that its answer
// fits the private data of an accept (196 bytes on IB/RoCE).
const maxOffers = 8

// allows reports whether the options let a connection use device dev.
func (o Options) allows(dev string) bool {
	if o.Device == "" || o.Device == "all" {
		return true
	}
	return slices.Contains(strings.Split(o.Device, ","), dev)
}

// manyDevices reports whether the options ask to stripe over several devices.
func (o Options) manyDevices() bool { return o.Device == "all" || strings.Contains(o.Device, ",") }

// width returns how many devices a striping dialer may use: those listed,
// or for "all" the active ports of this host that are not iWARP.
func (o Options) width() int {
	if o.Device != "all" {
		return len(strings.Split(o.Device, ","))
	}
	devs, _ := devicesAt(SysfsRoot, func(string, int) (int, int, error) { return 0, 0, nil })
	n := 0
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.Active() && d.Transport != "iWARP" {
				n++
			}
		}
	}
	return n
}

// nic is a device that lanes of a connection use beyond the one of its
// first lane: its protection domain, completion channel and queue, and
// the connection's buffers registered on it.
type nic struct {
	verbs   *C.struct_ibv_context
	pd      *C.struct_ibv_pd
	cc      *C.struct_ibv_comp_channel
	cq      *C.struct_ibv_cq
	mr      *C.struct_ibv_mr // c.bufs.mem
	winMR   *C.struct_ibv_mr // c.win.mem, once the window is open
	unacked int              // CQ events not yet acknowledged
}

// name returns the device's name.
func (n *nic) name() string { return C.GoString(C.ibv_get_device_name(n.verbs.device)) }

// nicFor returns the index in c.devs.lkeys of the device verbs (0 for lane 0's),
// setting it up for c first if it is new: sized for lanes queue pairs.
func (c *Conn) nicFor(verbs *C.struct_ibv_context, lanes int) (int, error) {
	if verbs == c.id.verbs {
		return 0, nil
	}
	for k, n := range c.devs.nics {
		if n.verbs == verbs {
			return k + 1, nil
		}
	}
	n := &nic{verbs: verbs}
	c.devs.nics = append(c.devs.nics, n) // so that free frees what follows, however far it gets
	var err error
	if n.pd, err = C.ibv_alloc_pd(verbs); n.pd == nil {
		return 0, fmt.Errorf("%s: ibv_alloc_pd: %w", n.name(), err)
	}
	if n.cc, err = C.ibv_create_comp_channel(verbs); n.cc == nil {
		return 0, fmt.Errorf("%s: ibv_create_comp_channel: %w", n.name(), err)
	}
	cqe := lanes * (c.lanes.sendWR + c.lanes.recvWR)
	if n.cq, err = C.ibv_create_cq(verbs, C.int(cqe), nil, n.cc, 0); n.cq == nil {
		return 0, fmt.Errorf("%s: ibv_create_cq (%d entries): %w", n.name(), cqe, err)
	}
	if n.mr, err = register(n.pd, c.bufs.mem, false); err != nil {
		return 0, fmt.Errorf("%s: %w", n.name(), err)
	}
	if err := c.watchCC(n.cc); err != nil {
		return 0, err
	}
	c.devs.lkeys = append(c.devs.lkeys, n.mr.lkey)
	c.poll.cqs = append(c.poll.cqs, n.cq)
	return len(c.devs.nics), nil
}

// watchCC makes Poll's waiter wake for the completion channel cc as well:
// the first time, it replaces the waiter on lane 0's channel with one on
// an epoll instance watching both.
func (c *Conn) watchCC(cc *C.struct_ibv_comp_channel) error {
	if err := unix.SetNonblock(int(cc.fd), true); err != nil {
		return fmt.Errorf("set a completion channel non-blocking: %w", err)
	}
	add := func(ep int, fd C.int) error {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fmt.Errorf("epoll_ctl: %w", err)
		}
		return nil
	}
	if len(c.devs.nics) > 1 {
		var err error
		if cerr := c.cqW.rc.Control(func(ep uintptr) { err = add(int(ep), cc.fd) }); cerr != nil {
			return cerr
		}
		return err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	defer unix.Close(ep) // the waiter keeps a duplicate
	if err := add(ep, c.cc.fd); err != nil {
		return err
	}
	if err := add(ep, cc.fd); err != nil {
		return err
	}
	w, err := newWaiter(C.int(ep), "rdma completion channels")
	if err != nil {
		return err
	}
	c.cqW.close()
	c.cqW = w
	return nil
}

// free releases what nicFor and OpenWindow set up on n (its queue pairs
// must be gone), reporting failures to check.
func (n *nic) free(check func(string, C.int, error)) {
	if n.cq != nil {
		if n.unacked > 0 {
			C.ibv_ack_cq_events(n.cq, C.uint(n.unacked))
		}
		rc, err := C.ibv_destroy_cq(n.cq)
		check("ibv_destroy_cq", rc, err)
	}
	if n.cc != nil {
		rc, err := C.ibv_destroy_comp_channel(n.cc)
		check("ibv_destroy_comp_channel", rc, err)
	}
	for _, mr := range []*C.struct_ibv_mr{n.mr, n.winMR} {
		if mr != nil {
			rc, err := C.ibv_dereg_mr(mr)
			check("ibv_dereg_mr", rc, err)
		}
	}
	if n.pd != nil {
		rc, err := C.ibv_dealloc_pd(n.pd)
		check("ibv_dealloc_pd", rc, err)
	}
}

// deviceNames names the devices c's lanes use, lane 0's first.
func (c *Conn) deviceNames() string {
	names := []string{deviceName(c.id)}
	for _, n := range c.devs.nics {
		names = append(names, n.name())
	}
	return strings.Join(names, ",")
}

// marshalOffers encodes a listener's addresses on its other devices: a
// count u8, then per address its length u8 (4 or 16) and its bytes.
func marshalOffers(addrs []netip.Addr) []byte {
	b := []byte{byte(len(addrs))}
	for _, a := range addrs {
		raw := a.AsSlice()
		b = append(b, byte(len(raw)))
		b = append(b, raw...)
	}
	return b
}

// parseOffers decodes marshalOffers; an empty b offers nothing.
func parseOffers(b []byte) ([]netip.Addr, error) {
	if len(b) == 0 {
		return nil, nil
	}
	n, b := int(b[0]), b[1:]
	if n > maxOffers {
		return nil, fmt.Errorf("receiver offered %d device addresses, more than %d", n, maxOffers)
	}
	addrs := make([]netip.Addr, 0, n)
	for range n {
		if len(b) < 1 || (b[0] != 4 && b[0] != 16) || len(b) < 1+int(b[0]) {
			return nil, fmt.Errorf("receiver's device addresses are malformed")
		}
		a, _ := netip.AddrFromSlice(b[1 : 1+int(b[0])])
		addrs = append(addrs, a)
		b = b[1+len(a.AsSlice()):]
	}
	return addrs, nil
}

// deviceAddr is a local address and the RDMA device rdma_cm binds it to.
type deviceAddr struct {
	Addr   netip.Addr
	Device string
	Port   int
	IWARP  bool
}

// deviceAddrs binds an rdma_cm id to each address of this host's network
// interfaces (but loopback and IPv6 link-local ones) to learn its RDMA
// device; addresses on none are left out.
func deviceAddrs() ([]deviceAddr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	cm, err := newEventChannel()
	if err != nil {
		return nil, err
	}
	defer cm.destroy()
	var das []deviceAddr
	for _, ifa := range ifas {
		pfx, err := netip.ParsePrefix(ifa.String())
		if err != nil || pfx.Addr().IsLoopback() || pfx.Addr().IsLinkLocalUnicast() {
			continue
		}
		a := pfx.Addr().Unmap()
		sa, err := sockaddr(netip.AddrPortFrom(a, 0))
		if err != nil {
			continue
		}
		var id *C.struct_rdma_cm_id
		if rc := C.rp_create_id(cm.ch, &id); rc != 0 {
			return nil, fmt.Errorf("rdma_create_id: %w", errno(rc))
		}
		if C.rp_bind(id, sa) == 0 && id.verbs != nil {
			das = append(das, deviceAddr{Addr: a, Device: deviceName(id), Port: int(id.port_num), IWARP: C.rp_is_iwarp(id) != 0})
		}
		C.rdma_destroy_id(id)
	}
	return das, nil
}

// offers returns the addresses a listener offers a sender that stripes
// over several devices, whose lane 0 reached local address at on device
// dev: one address of at's family on each other device it allows, with an
// active port. A listener bound to one address offers none (lanes could
// not reach it at another), nor does one whose options do not ask for
// several devices.
func (l *Listener) offers(at netip.Addr, dev string) []netip.Addr {
	if !l.wildcard || !l.opt.manyDevices() {
		return nil
	}
	das, err := deviceAddrs()
	if err != nil {
		return nil
	}
	seen := map[string]bool{dev: true}
	var addrs []netip.Addr
	for _, d := range das {
		if seen[d.Device] || d.IWARP || d.Addr.Is4() != at.Is4() || !l.opt.allows(d.Device) || !portActive(d.Device, d.Port) || len(addrs) == maxOffers {
			continue
		}
		seen[d.Device] = true
		addrs = append(addrs, d.Addr)
	}
	return addrs
}

// portActive reports whether sysfs says the device's port is ACTIVE.
func portActive(dev string, port int) bool {
	return sysfsValue(filepath.Join(SysfsRoot, dev, "ports", strconv.Itoa(port), "state")) == "ACTIVE"
}

// destinations returns where the lanes of a striped connection go: lane
// 0's address, then each address the receiver offered that rdma_cm reaches
// from a device the dialer allows (over RoCE or InfiniBand).
func (d Dialer) destinations(ctx context.Context, first netip.AddrPort, offers []netip.Addr) []netip.AddrPort {
	dests := []netip.AddrPort{first}
	opt := d.Options
	opt.IBPort, opt.GIDIndex = 0, -1
	for _, a := range offers {
		ap := netip.AddrPortFrom(a, first.Port())
		if r, err := resolveOne(ctx, ap, opt); err == nil && !r.IWARP {
			dests = append(dests, ap)
		}
	}
	return dests
}
