package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma/ringstate"
)

// Connection setup and state. The work is split by job: post.go posts
// sends, receives and control messages, poll.go takes completions,
// events.go watches the connection's CM events, close.go tears it down and
// mem.go maps and registers the buffers.

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

	cm     *eventChannel
	id     *C.struct_rdma_cm_id
	pd     *C.struct_ibv_pd
	cc     *C.struct_ibv_comp_channel
	cq     *C.struct_ibv_cq
	qp     *C.struct_ibv_qp
	mr     *C.struct_ibv_mr
	lkey   C.uint32_t
	fwd    atomic.Pointer[adopted] // set by Adopt, for a relay
	inline int
	cqW    *waiter

	mem              []byte // the mapped region
	send, recv, ctrl [][]byte
	pinned           atomic.Int64 // bytes registered, for Info

	// A receiver's window: its data receive buffers, recv[:window], mapped
	// and registered (for remote writes with a ring) by OpenWindow, in a
	// region of their own; until then they are nil and a data message
	// fails the connection.
	window     int
	windowOnce sync.Once
	windowErr  error
	winOpen    atomic.Bool
	winMem     []byte
	winMR      *C.struct_ibv_mr
	winLkey    C.uint32_t
	dataSize   int // the size of a data receive buffer

	// params are the negotiated stream parameters (a sender checks the
	// receiver's ring against them, see SetWindow).
	params conn.Params

	// life is held shared by every operation that touches the queue pair
	// or completion queue and exclusively while Close frees them.
	life      sync.RWMutex
	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	monDone   chan struct{} // closed when the CM event monitor ends

	errMu sync.Mutex
	err   error // first failure of the connection

	cqMu    sync.Mutex
	wcs     []C.struct_rp_wc
	pending []conn.Completion // taken from the CQ by SendControl or Close
	unacked int               // CQ events not yet acknowledged (Poll and Close only)

	// pollWaits counts the times Poll found nothing to report and began to
	// wait (BusyPoll: every busyCheck empty polls). Tests read it to know
	// that a Poll is blocked.
	pollWaits atomic.Uint64

	sendLen    []atomic.Int32 // bytes posted per send buffer, for OpSend
	sendsOut   atomic.Int32   // data sends posted and not completed
	sendPosted []atomic.Bool  // per send buffer: posted, not yet completed
	recvPosted []atomic.Bool  // per receive buffer: posted, not yet completed (SEND data path)

	ctrlMu   sync.Mutex
	ctrlFree []int // control buffers not in flight

	// A sender: whether SetWindow said the receiver's window is open; the
	// receiver's ring, if it granted one (see ring.go), known from the
	// accept and placed by SetWindow; and how many data messages were
	// posted.
	placed bool
	ring   *ring
	writes atomic.Uint64

	// A receiver offering a ring: recv[:slots] are the ring, recv[slots:]
	// the spares, and rs keeps their books; notes are the buffers of the
	// posted receive work requests, notesPerLane for each queue pair.
	slots        int
	notes        [][]byte
	notesPerLane int
	ringMu       sync.Mutex
	rs           *ringstate.Ring // under ringMu

	// Lanes: the queue pairs of a striped connection (see lanes.go), qps[0]
	// being qp; laneIDs are the rdma_cm ids of qps[1:]. sendWR and recvWR
	// size each lane's queues.
	qps            []*C.struct_ibv_qp
	laneIDs        []*C.struct_rdma_cm_id
	sendWR, recvWR int

	// Devices: nics are those lanes use beyond lane 0's (see nics.go);
	// laneNIC gives each lane's device as an index into lkeys, which holds
	// the key of c.mem on each device (c.lkey first), and cqs holds every
	// device's completion queue (c.cq first); Poll starts at cqs[cqTurn].
	nics    []*nic
	laneNIC []int
	lkeys   []C.uint32_t
	cqs     []*C.struct_ibv_cq
	cqTurn  int

	// split is, for a sender, the most bytes of one RDMA WRITE (0: a data
	// message per WRITE), and for a receiver the piece size the lengths
	// of split messages count in (see speed.go and postData); tuned says
	// why, when the port's rate chose it, and asked is how many lanes a
	// dialer asked for.
	split int
	tuned string
	asked int
}

// newConn returns a Conn owning the CM channel and id.
func newConn(cm *eventChannel, id *C.struct_rdma_cm_id, peer string, opt Options) *Conn {
	return &Conn{cm: cm, id: id, peer: peer, opt: opt, wcs: make([]C.struct_rp_wc, pollBatch)}
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
	c.window = window
	if ring {
		c.slots = window
	}
	pieces := 1
	if c.split > 0 {
		pieces = (l.SendSize + c.split - 1) / c.split
	}
	sendWR, recvWR := l.SendBufs*pieces+ctrlSlots, max(l.RecvBufs, 1)
	if c.slots > 0 {
		recvWR = l.RecvBufs + noteSlack
	}
	c.sendWR, c.recvWR = sendWR, recvWR
	cqe := lanes * (sendWR + recvWR)
	if c.cq, err = C.ibv_create_cq(verbs, C.int(cqe), nil, c.cc, 0); c.cq == nil {
		return fmt.Errorf("ibv_create_cq (%d entries): %w", cqe, err)
	}
	rc := C.rp_create_qp(c.id, c.pd, c.cq, C.int(sendWR), C.int(recvWR), wantInline)
	if rc < 0 {
		return fmt.Errorf("create queue pair (%d send, %d receive work requests): %w", sendWR, recvWR, errno(rc))
	}
	c.qp, c.inline = c.id.qp, int(rc)
	c.qps = []*C.struct_ibv_qp{c.qp}
	c.laneNIC = []int{0}
	c.cqs = []*C.struct_ibv_cq{c.cq}
	c.notesPerLane = recvWR
	if err := c.mapBuffers(l, lanes*recvWR); err != nil {
		return err
	}
	c.lkeys = []C.uint32_t{c.lkey}
	c.sendLen = make([]atomic.Int32, l.SendBufs)
	c.sendPosted = make([]atomic.Bool, l.SendBufs)
	c.ctrlFree = make([]int, ctrlSlots)
	for i := range c.ctrlFree {
		c.ctrlFree[i] = i
	}
	if c.slots > 0 {
		c.rs = ringstate.New(c.slots, l.RecvBufs-c.slots, l.RecvSize, lanes)
		return c.postNotes(0)
	}
	c.recvPosted = make([]atomic.Bool, l.RecvBufs)
	for i := window; i < len(c.recv); i++ {
		c.recvPosted[i].Store(true)
		if rc := c.postRecv(i); rc != 0 {
			return fmt.Errorf("ibv_post_recv: %w", errno(rc))
		}
	}
	return nil
}

// postNotes posts the notification receives of lane k of a ring.
func (c *Conn) postNotes(lane int) error {
	if len(c.notes) == 0 {
		return nil
	}
	for k := lane * c.notesPerLane; k < (lane+1)*c.notesPerLane; k++ {
		if rc := c.postNote(k); rc != 0 {
			return fmt.Errorf("ibv_post_recv: %w", errno(rc))
		}
	}
	return nil
}

// SendBuf returns send buffer i.
func (c *Conn) SendBuf(i int) []byte { return c.send[i] }

// RecvBuf returns receive buffer i.
func (c *Conn) RecvBuf(i int) []byte { return c.recv[i] }

// SendBufs returns how many send buffers the connection has.
func (c *Conn) SendBufs() int { return len(c.send) }

// RecvBufs returns how many receive buffers the connection has.
func (c *Conn) RecvBufs() int { return len(c.recv) }

// Info describes the connection.
func (c *Conn) Info() conn.Info {
	i := c.info
	i.Pinned = c.pinned.Load()
	return i
}

// fail records the first failure of the connection and wakes Poll.
func (c *Conn) fail(cause string) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = &conn.Error{Kind: conn.KindAborted, Op: "connection to " + c.peer + " lost", Err: errors.New(cause)}
	}
	c.errMu.Unlock()
	if c.cqW != nil {
		c.cqW.interrupt()
	}
}

// stopped returns conn.ErrClosed after Close, else the connection's failure.
func (c *Conn) stopped() error {
	if c.closing.Load() {
		return conn.ErrClosed
	}
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// failed reports whether the connection has failed.
func (c *Conn) failed() bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err != nil
}

// start records the connection's description, shortens the RNR retry
// delay (see rp_set_rnr_timer) and starts watching the connection's CM
// events for a peer that goes away.
func (c *Conn) start(p conn.Params) {
	C.rp_set_rnr_timer(c.qp, rnrTimer)
	c.params = p
	c.info = conn.Info{Transport: "rdma", Device: c.deviceNames(), Port: int(c.id.port_num),
		DataPath: opName(c.ring != nil || c.slots > 0), QPs: len(c.qps), Write: c.split, Tuned: c.tuned,
		Local: localAddr(c.id), Remote: peerAddr(c.id), Chunk: p.Chunk, Depth: p.Depth}
	c.monDone = make(chan struct{})
	go c.monitor()
}
