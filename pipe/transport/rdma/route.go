package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Route is where rdma_cm would send a connection to a peer: the device,
// port and source GID it resolved the peer's address and route to.
type Route struct {
	Peer   string // the address resolved ("ip:port")
	Device string
	Port   int
	GID    netip.Addr // the source GID (zero on iWARP, which has none)
	IWARP  bool
	Local  string // the local address rdma_cm chose
}

// ResolveRoute resolves addr ("host:port") and the route to it the way Dial
// does, without connecting, and reports where the connection would go. It
// fails like Dial: kind conn.KindNoRDMA when no RDMA device reaches addr.
func ResolveRoute(ctx context.Context, addr string, opt Options) (Route, error) {
	op := "resolve a route to " + addr
	aps, err := prepare(ctx, op, addr, conn.NewParams(conn.DefaultChunk, conn.DefaultDepth), false)
	if err != nil {
		return Route{}, err
	}
	var first error
	for _, ap := range aps {
		r, err := resolveOne(ctx, ap, opt)
		if err == nil {
			return r, nil
		}
		if first == nil {
			first = &conn.Error{Kind: conn.KindOf(err), Op: fmt.Sprintf("%s (%s)", op, ap), Err: err}
		}
	}
	return Route{}, first
}

// resolveOne resolves the address and route to ap on a fresh id.
func resolveOne(ctx context.Context, ap netip.AddrPort, opt Options) (Route, error) {
	cm, err := newEventChannel()
	if err != nil {
		return Route{}, &conn.Error{Kind: conn.KindSetup, Err: local(err)}
	}
	var id *C.struct_rdma_cm_id
	if rc := C.rp_create_id(cm.ch, &id); rc != 0 {
		cm.destroy()
		return Route{}, &conn.Error{Kind: conn.KindSetup, Err: local(fmt.Errorf("rdma_create_id: %w", errno(rc)))}
	}
	c := newConn(cm, id, ap.String(), opt)
	defer c.free()
	proposal := conn.NewParams(conn.DefaultChunk, conn.DefaultDepth)
	dst, err := sockaddr(ap)
	if err != nil {
		return Route{}, &conn.Error{Kind: conn.KindSetup, Err: err}
	}
	if rc := C.rp_resolve_addr(id, dst, resolveTimeoutMs); rc != 0 {
		if err := errno(rc); noDevice(err) {
			return Route{}, &conn.Error{Kind: conn.KindNoRDMA, Err: fmt.Errorf("no RDMA device for this address (rdma_resolve_addr: %w)", err)}
		}
		return Route{}, &conn.Error{Kind: conn.KindSetup, Err: fmt.Errorf("rdma_resolve_addr: %w", errno(rc))}
	}
	if _, err := c.expect(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED, proposal); err != nil {
		return Route{}, err
	}
	if rc, err := C.rdma_resolve_route(id, resolveTimeoutMs); rc != 0 {
		return Route{}, &conn.Error{Kind: conn.KindSetup, Err: fmt.Errorf("rdma_resolve_route: %w", err)}
	}
	if _, err := c.expect(ctx, C.RDMA_CM_EVENT_ROUTE_RESOLVED, proposal); err != nil {
		return Route{}, err
	}
	r := Route{Peer: ap.String(), Device: deviceName(id), Port: int(id.port_num), IWARP: C.rp_is_iwarp(id) != 0, Local: localAddr(id)}
	if !r.IWARP {
		var g [16]byte
		C.rp_source_gid(id, (*C.uint8_t)(unsafe.Pointer(&g[0])))
		r.GID = netip.AddrFrom16(g)
	}
	if err := checkDevice(id, opt, ap.String()); err != nil {
		return r, &conn.Error{Kind: conn.KindSetup, Err: err}
	}
	return r, nil
}

// SourceGIDIndex returns the GID table index the connection's queue pair
// sends from, as the device reports it, or -1 when its path carries no
// global route header (InfiniBand within a subnet, iWARP).
func (c *Conn) SourceGIDIndex() (int, error) {
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if c.qp == nil || c.life.closing.Load() {
		return -1, fmt.Errorf("query the queue pair of %s: connection closed", c.peer)
	}
	var idx C.int
	if rc := C.rp_qp_sgid_index(c.qp, &idx); rc != 0 {
		return -1, fmt.Errorf("ibv_query_qp of the connection to %s: %w", c.peer, errno(rc))
	}
	return int(idx), nil
}
