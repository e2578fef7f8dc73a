// Package rdma is the RDMA verbs transport of rdmapipe: a conn.Conn over an
// RDMA reliable-connected queue pair, set up with the RDMA connection manager
// (librdmacm) and driven with libibverbs through cgo; both libraries are
// loaded on first use (see dl.go). It works over
// InfiniBand, RoCE (including SoftRoCE, rdma_rxe) and iWARP.
//
// Connection setup: the dialer resolves the address and route with rdma_cm,
// creates its queue pair and buffers, posts all of its receives and connects
// with the encoded proposal (conn.Params, conn.ParamsLen bytes) as CM
// private data. The listener decodes the proposal from the connect
// request, negotiates (conn.Negotiate), creates its queue pair and buffers, posts all of its
// receives and accepts with the encoded answer as private data; the dialer
// reads the answer from the ESTABLISHED event. On iWARP, whose initiator
// must send first, three 8-byte messages of the transport's own follow (the
// dialer's first message, the listener's answer, the dialer's
// confirmation) before Dial and Accept return the connection (see
// first.go). A refused negotiation is
// rejected with the listener's own parameters as private data, so that the
// dialer can say why; a busy listener (conn.Listener.SetBusy, or too many
// setups in progress) rejects with Params.Busy set, before it allocates
// anything. The listener sets up each request in a goroutine of its own,
// so a peer that never completes its connection delays no one. Up to three
// bytes after the proposal ask for the RDMA WRITE data path, its lanes and
// split writes, and the answer then carries the ring's grant and the
// listener's other addresses (see ring.go and nics.go); the ring's place
// travels later, in the engine's welcome (see OpenWindow). Requests of at
// most 19 bytes, answers of at most 165 and refusals of 16 fit every
// transport's private data limit (56 bytes in an IB/RoCE REQ, 196 in a
// REP, 148 in a REJ, 512 for iWARP).
//
// Each side maps one anonymous memory region outside the Go heap (2 MiB
// huge pages when available), carves it into its conn.Layout's buffers plus
// a small ring of control-message buffers, and registers it; a receiver's
// window gets a region of its own (see OpenWindow). Completions are
// event-driven through a completion channel by default; Options.BusyPoll
// spins on the completion queue instead.
package rdma

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Options select and tune the RDMA device of a connection. The zero value
// asks for GID index 0 to be verified; DefaultOptions lets rdma_cm choose.
type Options struct {
	// Device, if not empty, is the RDMA device (e.g. "mlx5_0", "rxe0") the
	// connection must use. rdma_cm picks the device from the IP address;
	// a connection whose address maps to another device fails with an
	// error naming both. A comma-separated list ("mlx5_0,mlx5_1") or
	// "all" (every active port that reaches the peer) stripes the lanes
	// over several devices (see nics.go): the first lane's address must be
	// on one of them. A listener offers a striping sender its listed
	// devices, and with no Device all of them.
	Device string
	// IBPort, if not 0, is the device port the connection must use,
	// verified like Device.
	IBPort int
	// GIDIndex, if >= 0, is the GID table index the connection must use;
	// -1 lets rdma_cm choose. rdma_cm derives the source GID from the IP
	// address and this package does not override it: it verifies that the
	// GID at GIDIndex equals the one rdma_cm chose and fails otherwise.
	// RoCE v1 and v2 entries of one address hold the same GID, so both
	// pass; the RoCE version is rdma_cm's (see its default_roce_mode in
	// configfs). iWARP devices have no GID to choose: GIDIndex >= 0 fails.
	GIDIndex int
	// BusyPoll makes Poll spin on the completion queue instead of sleeping
	// on the completion channel: lower latency, one busy CPU per Conn.
	BusyPoll bool
	// SendOnly makes data travel as SENDs into the receiver's posted
	// buffers instead of RDMA WRITEs with immediate into its ring (see
	// ring.go); either side can ask for it. iWARP always sends.
	SendOnly bool
	// QPs is how many queue pairs a dialer asks to stripe the stream over
	// (see lanes.go), and the most a listener grants; 0 means, for a
	// dialer, what the rate of the port suggests (1 below 200 Gb/s, see
	// speed.go), and 16 for a listener. Only the RDMA WRITE data path is
	// striped.
	QPs int
	// MaxWrite, if > 0, is the most bytes a dialer puts in one RDMA WRITE:
	// a larger data message goes as several, the last one with the
	// immediate (a power of two from 4096; others are rounded down). 0
	// means what the rate of the port suggests (no split below 200 Gb/s,
	// see speed.go). The receiver must grant it.
	MaxWrite int
}

// DefaultOptions returns Options that let rdma_cm choose device, port and
// GID, with event-driven completions.
func DefaultOptions() Options { return Options{GIDIndex: -1} }

// Available reports whether RDMA can be used on this host: nil if at least
// one RDMA device opens and the RDMA connection manager is present, else a
// *conn.Error of kind conn.KindNoRDMA saying what is missing.
func Available() error {
	if err := probe(); err != nil {
		return &conn.Error{Kind: conn.KindNoRDMA, Err: err}
	}
	return nil
}

// probe looks for an RDMA device that opens and for rdma_cm. When the
// kernel lists no RDMA device it says so without loading the verbs
// libraries.
func probe() error {
	if len(sysfsDevices()) == 0 && !hasEntries(verbsClass) {
		return errors.New("no RDMA devices found (the kernel lists none in " + SysfsRoot + "): load a driver such as rdma_rxe or mlx5_ib")
	}
	if err := load(); err != nil {
		return err
	}
	var name [64]C.char
	var openErr C.int
	n := C.rp_probe(&name[0], C.int(len(name)), &openErr)
	switch {
	case n < 0:
		return fmt.Errorf("no RDMA devices found (ibv_get_device_list: %v: the kernel has no RDMA support loaded): load a driver such as rdma_rxe or mlx5_ib", syscall.Errno(-n))
	case n == 0:
		if devs := sysfsDevices(); len(devs) > 0 {
			return fmt.Errorf("RDMA devices %s exist but libibverbs has no userspace provider for them: install ibverbs-providers (rdma-core)", strings.Join(devs, ", "))
		}
		return errors.New("no RDMA devices found (ibv_get_device_list returned none): load a driver such as rdma_rxe or mlx5_ib")
	case openErr != 0:
		return fmt.Errorf("cannot open RDMA device %s: %v: check the permissions of /dev/infiniband/uverbs*", C.GoString(&name[0]), syscall.Errno(openErr))
	}
	var ch *C.struct_rdma_event_channel
	if rc := C.rp_create_channel(&ch); rc != 0 {
		return fmt.Errorf("RDMA connection manager not available (rdma_create_event_channel: %v): load the rdma_ucm kernel module", syscall.Errno(-rc))
	}
	C.rdma_destroy_event_channel(ch)
	return nil
}

// verbsClass is where the kernel lists the devices' userspace verbs
// interfaces (what libibverbs opens).
const verbsClass = "/sys/class/infiniband_verbs"

// hasEntries reports whether the directory dir exists and is not empty.
func hasEntries(dir string) bool {
	ents, _ := os.ReadDir(dir)
	return len(ents) > 0
}

// sysfsDevices lists the RDMA devices the kernel knows.
func sysfsDevices() []string {
	ents, _ := os.ReadDir(SysfsRoot)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// errno converts a negative errno returned by a helper in verbs.c.
func errno(rc C.int) error { return syscall.Errno(-rc) }

// noDevice reports whether err means that an address has no RDMA device.
func noDevice(err error) bool {
	return errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EADDRNOTAVAIL)
}

// deviceName returns the name of the device id is bound to.
func deviceName(id *C.struct_rdma_cm_id) string {
	if p := C.rp_device_name(id); p != nil {
		return C.GoString(p)
	}
	return ""
}

// checkDevice verifies that id, bound to a device by rdma_cm, matches opt.
func checkDevice(id *C.struct_rdma_cm_id, opt Options, addr string) error {
	dev, port := deviceName(id), int(id.port_num)
	if !opt.allows(dev) {
		return fmt.Errorf("address %s is on RDMA device %s, not on the requested device %s", addr, dev, opt.Device)
	}
	if opt.IBPort != 0 && port != opt.IBPort {
		return fmt.Errorf("address %s is on port %d of %s, not on the requested port %d", addr, port, dev, opt.IBPort)
	}
	if opt.GIDIndex >= 0 && C.rp_is_iwarp(id) != 0 {
		return fmt.Errorf("GID index %d was requested, but %s is an iWARP device, whose GID rdma_cm does not choose: use GID index -1", opt.GIDIndex, dev)
	}
	if opt.GIDIndex >= 0 {
		var want, got [16]byte
		if rc := C.rp_query_gid(id, C.int(opt.GIDIndex), (*C.uint8_t)(unsafe.Pointer(&want[0]))); rc != 0 {
			return fmt.Errorf("query GID index %d of %s port %d: %v", opt.GIDIndex, dev, port, errno(rc))
		}
		C.rp_source_gid(id, (*C.uint8_t)(unsafe.Pointer(&got[0])))
		if want != got {
			return fmt.Errorf("GID index %d of %s port %d is %s, but rdma_cm uses GID %s for address %s: use the address that belongs to GID index %d (see show_gids), or GID index -1",
				opt.GIDIndex, dev, port, gidString(want), gidString(got), addr, opt.GIDIndex)
		}
	}
	return nil
}

// gidString formats a GID like an IPv6 address.
func gidString(g [16]byte) string { return netip.AddrFrom16(g).String() }
