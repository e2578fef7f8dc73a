package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe"
)

const (
	// ctrlSlots is how many SendControl messages may be in flight at once.
	ctrlSlots = 16
	// wantInline is the inline data size asked of the queue pair; control
	// messages up to the size granted are sent with IBV_SEND_INLINE.
	wantInline = 64
	// pollBatch is how many completions one cgo call takes at most.
	pollBatch = 32
	// ackBatch is how many completion events are acknowledged at once.
	ackBatch = 64
	// busyCheck is how many empty polls BusyPoll makes between checks of
	// the context and the connection state.
	busyCheck = 64
	// closeTimeout bounds how long Close waits for queued sends.
	closeTimeout = 2 * time.Second
	// ctrlWaitMax is the longest pause between two looks for a free
	// control buffer.
	ctrlWaitMax = 10 * time.Millisecond
	// bufAlign is the alignment of every buffer in the region.
	bufAlign = 64
	// hugePage is the huge page size asked for large regions (MAP_HUGE_2MB).
	hugePage = 2 << 20
	// rnrTimer is the IB-encoded RNR NAK delay: 12 is 0.64 ms.
	rnrTimer = 12
)

// Work request ids: the kind in the top byte, the buffer index below.
const (
	wrData   uint64 = 1 << 56
	wrCtrl   uint64 = 2 << 56
	wrRecv   uint64 = 3 << 56
	wrKind   uint64 = 0xff << 56
	wrBufMax uint64 = 1<<56 - 1
)

// Conn is an RDMA connection: an RC queue pair with its completion queue,
// completion channel and one registered memory region holding all of its
// buffers. It implements pipe.Conn. Buffers returned by SendBuf and RecvBuf
// are unmapped by Close and must not be used afterwards.
type Conn struct {
	opt  Options
	peer string
	info pipe.Info

	cm     *eventChannel
	id     *C.struct_rdma_cm_id
	pd     *C.struct_ibv_pd
	cc     *C.struct_ibv_comp_channel
	cq     *C.struct_ibv_cq
	qp     *C.struct_ibv_qp
	mr     *C.struct_ibv_mr
	lkey   C.uint32_t
	inline int
	cqW    *waiter

	mem              []byte // the mapped region
	send, recv, ctrl [][]byte

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
	pending []pipe.Completion // taken from the CQ by SendControl or Close
	unacked int               // CQ events not yet acknowledged (Poll and Close only)

	sendLen  []atomic.Int32 // bytes posted per send buffer, for OpSend
	sendsOut atomic.Int32   // data sends posted and not completed

	ctrlMu   sync.Mutex
	ctrlFree []int // control buffers not in flight
}

// newConn returns a Conn owning the CM channel and id.
func newConn(cm *eventChannel, id *C.struct_rdma_cm_id, peer string, opt Options) *Conn {
	return &Conn{cm: cm, id: id, peer: peer, opt: opt, wcs: make([]C.struct_rp_wc, pollBatch)}
}

// setup creates the queue pair and buffers for layout l on the device
// rdma_cm bound the id to, and posts every receive buffer.
func (c *Conn) setup(l pipe.Layout) error {
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
	sendWR, recvWR := l.SendBufs+ctrlSlots, max(l.RecvBufs, 1)
	if c.cq, err = C.ibv_create_cq(verbs, C.int(sendWR+recvWR), nil, c.cc, 0); c.cq == nil {
		return fmt.Errorf("ibv_create_cq (%d entries): %w", sendWR+recvWR, err)
	}
	rc := C.rp_create_qp(c.id, c.pd, c.cq, C.int(sendWR), C.int(recvWR), wantInline)
	if rc < 0 {
		return fmt.Errorf("create queue pair (%d send, %d receive work requests): %w", sendWR, recvWR, errno(rc))
	}
	c.qp, c.inline = c.id.qp, int(rc)
	if err := c.mapBuffers(l); err != nil {
		return err
	}
	c.sendLen = make([]atomic.Int32, l.SendBufs)
	c.ctrlFree = make([]int, ctrlSlots)
	for i := range c.ctrlFree {
		c.ctrlFree[i] = i
	}
	for i := range c.recv {
		if rc := c.postRecv(i); rc != 0 {
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
func (c *Conn) Info() pipe.Info { return c.info }

// PostSend posts the first n bytes of send buffer i as one signaled SEND.
func (c *Conn) PostSend(i, n int) error {
	if i < 0 || i >= len(c.send) || n < 0 || n > len(c.send[i]) {
		return pipe.Errorf(pipe.KindInternal, "post send to "+c.peer, "buffer %d, %d bytes: out of range", i, n)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	c.sendLen[i].Store(int32(n))
	c.sendsOut.Add(1)
	if rc := C.rp_post_send(c.qp, C.uint64_t(wrData|uint64(i)), unsafe.Pointer(&c.send[i][0]), C.uint32_t(n), c.lkey, 0); rc != 0 {
		c.sendsOut.Add(-1)
		return &pipe.Error{Kind: pipe.KindAborted, Op: "post send to " + c.peer, Err: fmt.Errorf("ibv_post_send: %w", errno(rc))}
	}
	return nil
}

// PostRecv makes receive buffer i available for the next message.
func (c *Conn) PostRecv(i int) error {
	if i < 0 || i >= len(c.recv) {
		return pipe.Errorf(pipe.KindInternal, "post receive from "+c.peer, "buffer %d out of range", i)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	if rc := c.postRecv(i); rc != 0 {
		return &pipe.Error{Kind: pipe.KindAborted, Op: "post receive from " + c.peer, Err: fmt.Errorf("ibv_post_recv: %w", errno(rc))}
	}
	return nil
}

func (c *Conn) postRecv(i int) C.int {
	b := c.recv[i]
	return C.rp_post_recv(c.qp, C.uint64_t(wrRecv|uint64(i)), unsafe.Pointer(&b[0]), C.uint32_t(len(b)), c.lkey)
}

// SendControl sends p from one of a ring of registered buffers (inline
// when it fits). If every control buffer is in flight (the peer is not
// taking messages: paused, or its receives are all in use) it reaps
// completions itself until one is free, keeping other completions for
// Poll. It waits as long as ctx lives and the connection stands: a message
// is either queued or SendControl returns an error, never dropped.
func (c *Conn) SendControl(ctx context.Context, p []byte) error {
	if len(p) > pipe.MaxControl {
		return pipe.Errorf(pipe.KindInternal, "send control message to "+c.peer, "%d bytes exceed the limit of %d", len(p), pipe.MaxControl)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.stopped(); err != nil {
		return err
	}
	slot, err := c.takeSlot(ctx)
	if err != nil {
		return err
	}
	b := c.ctrl[slot]
	copy(b, p)
	inl := C.int(0)
	if len(p) <= c.inline {
		inl = 1
	}
	if rc := C.rp_post_send(c.qp, C.uint64_t(wrCtrl|uint64(slot)), unsafe.Pointer(&b[0]), C.uint32_t(len(p)), c.lkey, inl); rc != 0 {
		c.freeSlot(slot)
		err := fmt.Errorf("ibv_post_send: %w", errno(rc))
		c.fail(err.Error())
		return &pipe.Error{Kind: pipe.KindAborted, Op: "send control message to " + c.peer, Err: err}
	}
	return nil
}

// takeSlot returns a free control buffer, reaping completions while none
// is, until ctx ends or the connection stops.
func (c *Conn) takeSlot(ctx context.Context) (int, error) {
	for wait := time.Microsecond; ; wait = min(2*wait, ctrlWaitMax) {
		c.ctrlMu.Lock()
		if n := len(c.ctrlFree); n > 0 {
			slot := c.ctrlFree[n-1]
			c.ctrlFree = c.ctrlFree[:n-1]
			c.ctrlMu.Unlock()
			return slot, nil
		}
		c.ctrlMu.Unlock()
		if err := c.stopped(); err != nil {
			return 0, err
		}
		if err := ctx.Err(); err != nil {
			return 0, &pipe.Error{Kind: pipe.KindAborted, Op: "send control message to " + c.peer,
				Err: fmt.Errorf("all %d control buffers still in flight: peer not receiving (%w)", ctrlSlots, err)}
		}
		if c.drain() > 0 {
			wait = time.Microsecond
			continue
		}
		time.Sleep(wait)
	}
}

func (c *Conn) freeSlot(slot int) {
	c.ctrlMu.Lock()
	c.ctrlFree = append(c.ctrlFree, slot)
	c.ctrlMu.Unlock()
}

// ctrlBusy reports whether a control message is in flight.
func (c *Conn) ctrlBusy() bool {
	c.ctrlMu.Lock()
	defer c.ctrlMu.Unlock()
	return len(c.ctrlFree) < ctrlSlots
}

// Poll waits for completions and stores up to len(cs) of them. Control
// message completions are handled internally and never reported. A failed
// work request fails the connection: completions before it are still
// reported, then Poll returns the failure. After Close it returns
// pipe.ErrClosed.
func (c *Conn) Poll(ctx context.Context, cs []pipe.Completion) (int, error) {
	if len(cs) == 0 {
		return 0, nil
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closing.Load() {
		return 0, pipe.ErrClosed
	}
	for spin := 0; ; spin++ {
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
		if c.opt.BusyPoll {
			if spin%busyCheck == 0 {
				if err := c.stopped(); err != nil {
					return c.last(cs, err)
				}
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				runtime.Gosched()
			}
			continue
		}
		if err := c.stopped(); err != nil {
			return c.last(cs, err)
		}
		// Arm the channel, then poll once more: a completion that arrived
		// before arming raises no event.
		if rc := C.rp_arm(c.cq); rc != 0 {
			c.fail(fmt.Sprintf("ibv_req_notify_cq: %v", errno(rc)))
			continue
		}
		if n := c.reap(cs); n > 0 {
			return n, nil
		}
		if err := c.cqW.wait(ctx, c.stopped, c.cqEvent); err != nil {
			if ctx.Err() != nil {
				return 0, err
			}
			return c.last(cs, err)
		}
	}
}

// last returns the completions that reached the CQ before the connection
// failed with err (the peer's last message, say, which can land just as its
// disconnect is noticed: the CM event and the CQ are not ordered), and err
// once there are none left.
func (c *Conn) last(cs []pipe.Completion, err error) (int, error) {
	if n := c.reap(cs); n > 0 {
		return n, nil
	}
	return 0, err
}

// cqEvent takes one event from the completion channel, if there is one.
// Events are acknowledged in batches; one event may stand for many
// completions.
func (c *Conn) cqEvent() bool {
	rc := C.rp_get_cq_event(c.cc)
	switch {
	case rc == 0:
		return false
	case rc < 0:
		c.fail(fmt.Sprintf("ibv_get_cq_event: %v", errno(rc)))
		return true
	}
	if c.unacked++; c.unacked >= ackBatch {
		C.ibv_ack_cq_events(c.cq, C.uint(c.unacked))
		c.unacked = 0
	}
	return true
}

// reap fills cs with kept and new completions.
func (c *Conn) reap(cs []pipe.Completion) int {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	n := copy(cs, c.pending)
	c.pending = c.pending[n:]
	for n < len(cs) {
		want := min(len(c.wcs), len(cs)-n)
		k := int(C.rp_poll(c.cq, &c.wcs[0], C.int(want)))
		if k < 0 {
			c.fail(fmt.Sprintf("ibv_poll_cq: %v", errno(C.int(k))))
			break
		}
		for i := range k {
			if comp, ok := c.complete(&c.wcs[i]); ok {
				cs[n] = comp
				n++
			}
		}
		if k < want {
			break
		}
	}
	return n
}

// drain takes completions from the CQ for SendControl and Close, keeping
// those Poll must report. It returns how many it took.
func (c *Conn) drain() int {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	k := int(C.rp_poll(c.cq, &c.wcs[0], C.int(len(c.wcs))))
	for i := range k {
		if comp, ok := c.complete(&c.wcs[i]); ok {
			c.pending = append(c.pending, comp)
		}
	}
	return max(k, 0)
}

// complete accounts for one work completion and returns what to report.
func (c *Conn) complete(wc *C.struct_rp_wc) (pipe.Completion, bool) {
	id := uint64(wc.wr_id)
	i := int(id & wrBufMax)
	ok := wc.status == C.IBV_WC_SUCCESS
	if !ok {
		c.fail(wcError(wc.status))
	}
	switch id & wrKind {
	case wrData:
		c.sendsOut.Add(-1)
		if ok {
			return pipe.Completion{Op: pipe.OpSend, Buf: i, Len: int(c.sendLen[i].Load())}, true
		}
	case wrCtrl:
		c.freeSlot(i)
	case wrRecv:
		if ok {
			return pipe.Completion{Op: pipe.OpRecv, Buf: i, Len: int(wc.byte_len)}, true
		}
	}
	return pipe.Completion{}, false
}

// wcError describes a failed work completion.
func wcError(status C.uint32_t) string {
	switch status {
	case C.IBV_WC_WR_FLUSH_ERR:
		return "peer disconnected"
	case C.IBV_WC_LOC_LEN_ERR:
		return "local length error (a message was larger than the receive buffer)"
	}
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}

// fail records the first failure of the connection and wakes Poll.
func (c *Conn) fail(cause string) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = &pipe.Error{Kind: pipe.KindAborted, Op: "connection to " + c.peer + " lost", Err: errors.New(cause)}
	}
	c.errMu.Unlock()
	if c.cqW != nil {
		c.cqW.interrupt()
	}
}

// stopped returns pipe.ErrClosed after Close, else the connection's failure.
func (c *Conn) stopped() error {
	if c.closing.Load() {
		return pipe.ErrClosed
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
func (c *Conn) start(p pipe.Params) {
	C.rp_set_rnr_timer(c.qp, rnrTimer)
	c.info = pipe.Info{Transport: "rdma", Device: deviceName(c.id), Port: int(c.id.port_num),
		Local: localAddr(c.id), Remote: peerAddr(c.id), Chunk: p.Chunk, Depth: p.Depth}
	c.monDone = make(chan struct{})
	go c.monitor()
}

// monitor fails the connection when rdma_cm reports that it ended, so that
// Poll returns promptly even when no work request is outstanding.
func (c *Conn) monitor() {
	defer close(c.monDone)
	for {
		ev, err := c.cm.next(context.Background())
		if err != nil {
			if !c.closing.Load() {
				c.fail(err.Error())
			}
			return
		}
		switch ev._type {
		case C.RDMA_CM_EVENT_DISCONNECTED:
			c.fail("peer disconnected")
		case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			c.fail("RDMA device removed")
		case C.RDMA_CM_EVENT_TIMEWAIT_EXIT, C.RDMA_CM_EVENT_ADDR_CHANGE, C.RDMA_CM_EVENT_ESTABLISHED:
		default:
			c.fail(fmt.Sprintf("unexpected %s (status %d)", eventName(&ev), ev.status))
		}
	}
}

// Close waits up to two seconds for queued sends to complete, disconnects,
// unblocks a pending Poll and frees everything. It is safe to call more
// than once and from several goroutines.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		c.cqW.interrupt()
		deadline := time.Now().Add(closeTimeout)
		for (c.sendsOut.Load() > 0 || c.ctrlBusy()) && !c.failed() && time.Now().Before(deadline) {
			if c.drain() == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		C.rdma_disconnect(c.id)
		c.life.Lock()
		defer c.life.Unlock()
		c.closeErr = c.free()
	})
	return c.closeErr
}

// free releases whatever setup created, in dependency order. It is used by
// Close and by failed setups.
func (c *Conn) free() error {
	var errs []error
	check := func(what string, rc C.int, err error) {
		if rc != 0 {
			if err == nil {
				err = syscall.Errno(max(rc, -rc))
			}
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if c.monDone != nil {
		c.cm.w.close()
		<-c.monDone
	}
	if c.id != nil && c.id.qp != nil {
		C.rdma_destroy_qp(c.id)
	}
	if c.cq != nil {
		if c.unacked > 0 {
			C.ibv_ack_cq_events(c.cq, C.uint(c.unacked))
		}
		rc, err := C.ibv_destroy_cq(c.cq)
		check("ibv_destroy_cq", rc, err)
	}
	c.cqW.close()
	if c.cc != nil {
		rc, err := C.ibv_destroy_comp_channel(c.cc)
		check("ibv_destroy_comp_channel", rc, err)
	}
	if c.mr != nil {
		rc, err := C.ibv_dereg_mr(c.mr)
		check("ibv_dereg_mr", rc, err)
	}
	if c.pd != nil {
		rc, err := C.ibv_dealloc_pd(c.pd)
		check("ibv_dealloc_pd", rc, err)
	}
	if c.id != nil {
		rc, err := C.rdma_destroy_id(c.id)
		check("rdma_destroy_id", rc, err)
	}
	c.cm.destroy()
	if c.mem != nil {
		if err := unmapRegion(c.mem); err != nil {
			errs = append(errs, fmt.Errorf("munmap: %w", err))
		}
	}
	if len(errs) > 0 {
		return &pipe.Error{Kind: pipe.KindInternal, Op: "close connection to " + c.peer, Err: errors.Join(errs...)}
	}
	return nil
}
