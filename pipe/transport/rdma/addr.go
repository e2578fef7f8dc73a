package rdma

/*
#include <sys/socket.h>
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// resolve turns "host:port" into the addresses to try. An empty host
// resolves to the IPv4 wildcard address when listen is set.
func resolve(ctx context.Context, addr string, listen bool) ([]netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := net.DefaultResolver.LookupPort(ctx, "tcp", portStr)
	if err != nil {
		return nil, err
	}
	if host == "" {
		if !listen {
			return nil, fmt.Errorf("missing host in address %q", addr)
		}
		return []netip.AddrPort{netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))}, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.AddrPort{netip.AddrPortFrom(ip, uint16(port))}, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	aps := make([]netip.AddrPort, len(ips))
	for i, ip := range ips {
		aps[i] = netip.AddrPortFrom(ip.Unmap(), uint16(port))
	}
	return aps, nil
}

// sockaddr encodes ap for rdma_cm.
func sockaddr(ap netip.AddrPort) (*C.struct_sockaddr_storage, error) {
	var ss C.struct_sockaddr_storage
	ip := ap.Addr()
	family, scope := C.AF_INET6, 0
	if ip.Is4() {
		family = C.AF_INET
	} else if z := ip.Zone(); z != "" {
		if n, err := strconv.Atoi(z); err == nil {
			scope = n
		} else if ifi, err := net.InterfaceByName(z); err == nil {
			scope = ifi.Index
		} else {
			return nil, err
		}
	}
	raw := ip.As16()
	if ip.Is4() {
		a4 := ip.As4()
		copy(raw[:], a4[:])
	}
	if rc := C.rp_sockaddr(&ss, C.int(family), (*C.uint8_t)(unsafe.Pointer(&raw[0])), C.int(ap.Port()), C.uint32_t(scope)); rc != 0 {
		return nil, errno(rc)
	}
	return &ss, nil
}

// addrString formats a socket address from rdma_cm as "host:port".
func addrString(sa *C.struct_sockaddr) string {
	if sa == nil {
		return ""
	}
	var raw [16]byte
	var port C.int
	var scope C.uint32_t
	var ip netip.Addr
	switch C.rp_addr_of(sa, (*C.uint8_t)(unsafe.Pointer(&raw[0])), &port, &scope) {
	case C.AF_INET:
		ip = netip.AddrFrom4([4]byte(raw[:4]))
	case C.AF_INET6:
		ip = netip.AddrFrom16(raw).Unmap()
		if scope != 0 && ip.Is6() {
			zone := strconv.Itoa(int(scope))
			if ifi, err := net.InterfaceByIndex(int(scope)); err == nil {
				zone = ifi.Name
			}
			ip = ip.WithZone(zone)
		}
	default:
		return ""
	}
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// localAddr and peerAddr return the addresses of an rdma_cm id.
func localAddr(id *C.struct_rdma_cm_id) string { return addrString(C.rdma_get_local_addr(id)) }
func peerAddr(id *C.struct_rdma_cm_id) string  { return addrString(C.rdma_get_peer_addr(id)) }

// prepare does what Dial and Listen (listen) both do first for operation
// op: check the parameters (conn.KindUsage), that there is an RDMA device
// (conn.KindNoRDMA), and resolve addr (conn.KindSetup).
func prepare(ctx context.Context, op, addr string, p conn.Params, listen bool) ([]netip.AddrPort, error) {
	if err := p.Validate(); err != nil {
		return nil, &conn.Error{Kind: conn.KindUsage, Op: op, Err: err}
	}
	if err := probe(); err != nil {
		return nil, &conn.Error{Kind: conn.KindNoRDMA, Op: op, Err: err}
	}
	aps, err := resolve(ctx, addr, listen)
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: op, Err: err}
	}
	return aps, nil
}
