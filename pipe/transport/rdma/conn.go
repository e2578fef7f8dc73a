package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma/ringstate"
)

// Connection setup and state. The work is split by job, each part's state
// a type in its file: post.go posts sends, receives and control messages
// (posts), poll.go takes completions (poller), events.go watches the
// connection's CM events, close.go tears it down (life), mem.go maps and
// registers the buffers (buffers), window.go a receiver's window
// (recvWindow), ring.go the RDMA WRITE ring (recvRing), lanes.go and
// nics.go striping over queue pairs and devices (laneSet, devices),
// speed.go split writes (splitWrites) and forward.go a relay's forwards.

const (
	// ctrlSlots is how many SendControl messages may be in flight at once.
	ctrlSlots = 16
	// wantInline is the inline data size asked of the queue pair; control
	// messages up to the size granted are sent with IBV_SEND_INLINE.
	wantInline = 64
	// rnrTimer is the IB-encoded RNR NAK delay: 12 is 0.64 ms.
	rnrTimer = 12
)

// Work request ids: the kind in the top byte, the buffer index below.
const (
	wrData   uint64 = 1 << 56
	wrCtrl   uint64 = 2 << 56
	wrRecv   uint64 = 3 << 56
	wrNote   uint64 = 4 << 56 // a receive of a ring's receiver (see ring.go)
	wrFwd    uint64 = 5 << 56 // a send from an adopted receive buffer (see forward.go)
	wrPiece  uint64 = 6 << 56 // an unsignaled WRITE of a split data message (see ring.go), seen only if it fails
	wrKind   uint64 = 0xff << 56
	wrBufMax uint64 = 1<<56 - 1
)

// Conn is an RDMA connection: an RC queue pair with its completion queue,
// completion channel and a registered memory region holding its buffers,
// registered for local access only; a receiver's data receive buffers (its
// window) get a region of their own once the engine opens it, the only
// memory a peer may write into (see OpenWindow). It implements conn.Conn.
// Buffers returned by SendBuf and RecvBuf are unmapped by Close and must
// not be used afterwards.
type Conn struct {
	opt      Options
	peer     string
	addrPort netip.AddrPort // the address a dialer connected to
	info     conn.Info
	// params are the negotiated stream parameters (a sender checks the
	// receiver's ring against them, see SetWindow).
	params conn.Params

	cm     *eventChannel
	id     *C.struct_rdma_cm_id
	pd     *C.struct_ibv_pd
	cc     *C.struct_ibv_comp_channel
	cq     *C.struct_ibv_cq
	qp     *C.struct_ibv_qp
	cqW    *waiter
	inline int
	fwd    atomic.Pointer[adopted] // set by Adopt, for a relay

	// A sender: whether SetWindow said the receiver's window is open, and
	// the receiver's ring, if it granted one (see ring.go), known from the
	// accept and placed by SetWindow.
	placed bool
	ring   *ring

	bufs     buffers     // the mapped region and its buffers (mem.go)
	win      recvWindow  // a receiver's window (window.go)
	recvRing recvRing    // a receiver's ring and its notifications (ring.go)
	posts    posts       // what is posted (post.go)
	poll     poller      // completions taken from the CQs (poll.go)
	lanes    laneSet     // the queue pairs of a striped connection (lanes.go)
	devs     devices     // the devices lanes use (nics.go)
	split    splitWrites // data messages split into several WRITEs (speed.go)
	life     life        // failure and Close (close.go)
}

// newConn returns a Conn owning the CM channel and id.
func newConn(cm *eventChannel, id *C.struct_rdma_cm_id, peer string, opt Options) *Conn {
	return &Conn{cm: cm, id: id, peer: peer, opt: opt, poll: poller{wcs: make([]C.struct_rp_wc, pollBatch)}}
}

// setup creates the queue pair and buffers for layout l on the device
// rdma_cm bound the id to, and posts the receive buffers. A receiver's
// first window receive buffers, for data, are left to OpenWindow; with
// ring they form a ring for the peer to write into (see ring.go). The
// completion queue and, for a ring, the notification receives are sized
// for lanes queue pairs (see lanes.go).
func (c *Conn) setup(l conn.Layout, window int, ring bool, lanes int) error {
	verbs := c.id.verbs
	var err error
	if c.pd, err = C.ibv_alloc_pd(verbs); c.pd == nil {
		return fmt.Errorf("ibv_alloc_pd: %w", err)
	}
	if c.cc, err = C.ibv_create_comp_channel(verbs); c.cc == nil {
		return fmt.Errorf("ibv_create_comp_channel: %w", err)
	}
	if c.cqW, err = newWaiter(c.cc.fd, "rdma completion channel"); err != nil {
		return err
	}
	c.win.count = window
	if ring {
		c.recvRing.slots = window
	}
	pieces := 1
	if c.split.size > 0 {
		pieces = (l.SendSize + c.split.size - 1) / c.split.size
	}
	sendWR, recvWR := l.SendBufs*pieces+ctrlSlots, max(l.RecvBufs, 1)
	if c.recvRing.slots > 0 {
		recvWR = l.RecvBufs + noteSlack
	}
	c.lanes.sendWR, c.lanes.recvWR = sendWR, recvWR
	cqe := lanes * (sendWR + recvWR)
	if c.cq, err = C.ibv_create_cq(verbs, C.int(cqe), nil, c.cc, 0); c.cq == nil {
		return fmt.Errorf("ibv_create_cq (%d entries): %w", cqe, err)
	}
	rc := C.rp_create_qp(c.id, c.pd, c.cq, C.int(sendWR), C.int(recvWR), wantInline)
	if rc < 0 {
		return fmt.Errorf("create queue pair (%d send, %d receive work requests): %w", sendWR, recvWR, errno(rc))
	}
	c.qp, c.inline = c.id.qp, int(rc)
	c.lanes.qps = []*C.struct_ibv_qp{c.qp}
	c.devs.laneNIC = []int{0}
	c.poll.cqs = []*C.struct_ibv_cq{c.cq}
	c.recvRing.notesPerLane = recvWR
	if err := c.mapBuffers(l, lanes*recvWR); err != nil {
		return err
	}
	c.devs.lkeys = []C.uint32_t{c.bufs.lkey}
	c.posts.init(l.SendBufs)
	if c.recvRing.slots > 0 {
		c.recvRing.rs = ringstate.New(c.recvRing.slots, l.RecvBufs-c.recvRing.slots, l.RecvSize, lanes)
		return c.postNotes(0)
	}
	c.posts.recv = make([]atomic.Bool, l.RecvBufs)
	for i := window; i < len(c.bufs.recv); i++ {
		c.posts.recv[i].Store(true)
		if rc := c.postRecv(i); rc != 0 {
			return fmt.Errorf("ibv_post_recv: %w", errno(rc))
		}
	}
	return nil
}

// postNotes posts the notification receives of lane k of a ring.
func (c *Conn) postNotes(lane int) error {
	if len(c.recvRing.notes) == 0 {
		return nil
	}
	for k := lane * c.recvRing.notesPerLane; k < (lane+1)*c.recvRing.notesPerLane; k++ {
		if rc := c.postNote(k); rc != 0 {
			return fmt.Errorf("ibv_post_recv: %w", errno(rc))
		}
	}
	return nil
}

// SendBuf returns send buffer i.
func (c *Conn) SendBuf(i int) []byte { return c.bufs.send[i] }

// RecvBuf returns receive buffer i.
func (c *Conn) RecvBuf(i int) []byte { return c.bufs.recv[i] }

// SendBufs returns how many send buffers the connection has.
func (c *Conn) SendBufs() int { return len(c.bufs.send) }

// RecvBufs returns how many receive buffers the connection has.
func (c *Conn) RecvBufs() int { return len(c.bufs.recv) }

// Info describes the connection.
func (c *Conn) Info() conn.Info {
	i := c.info
	i.Pinned = c.bufs.pinned.Load()
	return i
}

// start records the connection's description, shortens the RNR retry
// delay (see rp_set_rnr_timer) and starts watching the connection's CM
// events for a peer that goes away.
func (c *Conn) start(p conn.Params) {
	C.rp_set_rnr_timer(c.qp, rnrTimer)
	c.params = p
	c.info = conn.Info{Transport: "rdma", Device: c.deviceNames(), Port: int(c.id.port_num),
		DataPath: opName(c.ring != nil || c.recvRing.slots > 0), QPs: len(c.lanes.qps), Write: c.split.size, Tuned: c.split.why,
		Local: localAddr(c.id), Remote: peerAddr(c.id), Chunk: p.Chunk, Depth: p.Depth}
	c.life.monDone = make(chan struct{})
	go c.monitor()
}
