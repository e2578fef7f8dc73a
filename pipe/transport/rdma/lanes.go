package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// Lanes: one stream over several queue pairs (Options.QPs, like perftest
// -q), for links one queue pair cannot fill and for spreading the work of
// a software RDMA device over cores. Only the RDMA WRITE data path is
// striped: the sender writes data message k into ring slot k mod slots
// over queue pair k mod lanes, so writes can complete out of order; the
// receiver puts them back in ring order from the slot numbers before the
// engine sees them. Control messages stay on lane 0 and carry, as
// immediate data, how many data messages the sender had posted before
// them; the receiver holds each one back until those have arrived, so
// that a heartbeat never overtakes the data it vouches for (package
// ringstate keeps those books).
//
// Setting up: the first queue pair connects as usual, asking for up to
// Options.QPs lanes; the receiver grants at most maxLanes, and only with a
// ring, and answers with the number and a random token with its ring. The
// sender then connects the other lanes one by one, each connect request
// carrying a join (joinLen bytes: "RDPJ", version u16, lane u8, zero u8,
// token u64), which the listener matches to the setup in progress by its
// token and accepts with a queue pair on the same protection domain,
// completion queue and buffers (those of its device, when the lanes
// are spread over several devices, see nics.go). The setup ends when
// every lane is established, all within the listener's establish timeout.

// laneSet are the queue pairs of a striped connection, qps[0] being the
// connection's qp; ids are the rdma_cm ids of qps[1:], sendWR and recvWR
// size each lane's queues, and asked is how many lanes a dialer asked for.
type laneSet struct {
	qps            []*C.struct_ibv_qp
	ids            []*C.struct_rdma_cm_id
	sendWR, recvWR int
	asked          int
}

// maxLanes bounds the queue pairs of one connection.
const maxLanes = 16

// joinLen is the encoded size of a join.
const joinLen = 16

var joinMagic = [4]byte{'R', 'D', 'P', 'J'}

// join is the connect request of lane Lane of the connection Token names.
type join struct {
	Lane  int
	Token uint64
}

// marshal encodes j.
func (j join) marshal() []byte {
	b := make([]byte, joinLen)
	copy(b, joinMagic[:])
	binary.LittleEndian.PutUint16(b[4:], conn.Version)
	b[6] = byte(j.Lane)
	binary.LittleEndian.PutUint64(b[8:], j.Token)
	return b
}

// parseJoin decodes a join, reporting whether priv is one.
func parseJoin(priv []byte) (join, bool) {
	if len(priv) < joinLen || [4]byte(priv[:4]) != joinMagic || binary.LittleEndian.Uint16(priv[4:]) != conn.Version {
		return join{}, false
	}
	return join{Lane: int(priv[6]), Token: binary.LittleEndian.Uint64(priv[8:])}, true
}

// newToken returns a random join token.
func newToken() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// addLane creates a queue pair for the rdma_cm id of a new lane, one of
// lanes, on the protection domain and completion queue of c on the id's
// device (see nics.go), and posts its notification receives (a ring's
// receiver).
func (c *Conn) addLane(id *C.struct_rdma_cm_id, lanes int) error {
	c.lanes.ids = append(c.lanes.ids, id)
	k, err := c.nicFor(id.verbs, lanes)
	if err != nil {
		return fmt.Errorf("lane %d: %w", len(c.lanes.qps), err)
	}
	pd, cq := c.pd, c.cq
	if k > 0 {
		pd, cq = c.devs.nics[k-1].pd, c.devs.nics[k-1].cq
	}
	if rc := C.rp_create_qp(id, pd, cq, C.int(c.lanes.sendWR), C.int(c.lanes.recvWR), C.int(c.inline)); rc < 0 {
		return fmt.Errorf("create queue pair of lane %d: %w", len(c.lanes.qps), errno(rc))
	}
	c.lanes.qps = append(c.lanes.qps, id.qp)
	c.devs.laneNIC = append(c.devs.laneNIC, k)
	return c.postNotes(len(c.lanes.qps) - 1)
}

// dialLanes connects lanes 1 to lanes-1 of c, lane k to dests[k mod
// len(dests)] (dests[0] being lane 0's address, see nics.go).
func (d Dialer) dialLanes(ctx context.Context, c *Conn, lanes int, token uint64, proposal conn.Params, dests []netip.AddrPort) error {
	for lane := 1; lane < lanes; lane++ {
		dst, err := sockaddr(dests[lane%len(dests)])
		if err != nil {
			return err
		}
		var id *C.struct_rdma_cm_id
		if rc := C.rp_create_id(c.cm.ch, &id); rc != 0 {
			return fmt.Errorf("rdma_create_id: %w", errno(rc))
		}
		if rc := C.rp_resolve_addr(id, dst, resolveTimeoutMs); rc != 0 {
			C.rdma_destroy_id(id)
			return fmt.Errorf("lane %d: rdma_resolve_addr: %w", lane, errno(rc))
		}
		if err := c.expectOn(ctx, id, C.RDMA_CM_EVENT_ADDR_RESOLVED, proposal); err != nil {
			C.rdma_destroy_id(id)
			return fmt.Errorf("lane %d: %w", lane, err)
		}
		if rc, err := C.rdma_resolve_route(id, resolveTimeoutMs); rc != 0 {
			C.rdma_destroy_id(id)
			return fmt.Errorf("lane %d: rdma_resolve_route: %w", lane, err)
		}
		if err := c.expectOn(ctx, id, C.RDMA_CM_EVENT_ROUTE_RESOLVED, proposal); err != nil {
			C.rdma_destroy_id(id)
			return fmt.Errorf("lane %d: %w", lane, err)
		}
		if dev := deviceName(id); !d.allows(dev) {
			C.rdma_destroy_id(id)
			return fmt.Errorf("lane %d: %s is on RDMA device %s, not on the requested device %s", lane, dests[lane%len(dests)], dev, d.Device)
		}
		if err := c.addLane(id, lanes); err != nil {
			return err
		}
		priv := join{Lane: lane, Token: token}.marshal()
		if rc := C.rp_connect(id, unsafe.Pointer(&priv[0]), C.int(len(priv)), 1); rc != 0 {
			return fmt.Errorf("lane %d: rdma_connect: %w", lane, errno(rc))
		}
		if err := c.expectOn(ctx, id, C.RDMA_CM_EVENT_ESTABLISHED, proposal); err != nil {
			return fmt.Errorf("lane %d: %w", lane, err)
		}
	}
	return nil
}

// acceptLanes waits for the joins of lanes 1 to lanes-1 of c, which the
// listener's request loop hands over on joins, and accepts each.
func (l *Listener) acceptLanes(ctx context.Context, c *Conn, lanes int, joins <-chan *event, proposal conn.Params) error {
	for lane := 1; lane < lanes; lane++ {
		var req *event
		select {
		case req = <-joins:
		case <-ctx.Done():
			return fmt.Errorf("the sender did not connect lane %d of %d: %w", lane, lanes, ctx.Err())
		}
		id := req.id
		if j, _ := parseJoin(privateData(req)); j.Lane != lane {
			C.rp_reject(id, nil, 0)
			C.rdma_destroy_id(id)
			return fmt.Errorf("the sender connected lane %d where lane %d was due", j.Lane, lane)
		}
		if dev := deviceName(id); !l.opt.allows(dev) {
			C.rp_reject(id, nil, 0)
			C.rdma_destroy_id(id)
			return fmt.Errorf("the sender connected lane %d to %s, on RDMA device %s, not on the requested device %s", lane, localAddr(id), dev, l.opt.Device)
		}
		if rc, err := C.rdma_migrate_id(id, c.cm.ch); rc != 0 {
			C.rp_reject(id, nil, 0)
			C.rdma_destroy_id(id)
			return fmt.Errorf("lane %d: rdma_migrate_id: %w", lane, err)
		}
		if err := c.addLane(id, lanes); err != nil {
			C.rp_reject(id, nil, 0)
			return err
		}
		if rc := C.rp_accept(id, nil, 0, 0, 1); rc != 0 {
			return fmt.Errorf("lane %d: rdma_accept: %w", lane, errno(rc))
		}
		if err := c.expectOn(ctx, id, C.RDMA_CM_EVENT_ESTABLISHED, proposal); err != nil {
			return fmt.Errorf("lane %d: %w", lane, err)
		}
	}
	return nil
}

// expectOn is expect for the event of one lane's id; an event of another
// lane (lane 0 disconnected, say) ends the setup.
func (c *Conn) expectOn(ctx context.Context, id *C.struct_rdma_cm_id, want C.int, proposal conn.Params) error {
	ev, err := c.expect(ctx, want, proposal)
	if err == nil && ev.id != id {
		err = fmt.Errorf("unexpected %s on another lane", eventName(&ev))
	}
	return err
}
