package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// adopted is another connection's receive memory registered with this
// connection's protection domain, so that a relay sends from it (see
// conn.Forwarder): one memory region per mapped region of up's that holds
// receive buffers and device of this connection (see nics.go), and the
// keys to send each buffer with.
type adopted struct {
	up      conn.Conn
	mrs     []*C.struct_ibv_mr
	lkeys   [][]C.uint32_t // per adopted buffer, per device as c.devs.lkeys
	sendLen []atomic.Int32 // bytes posted per adopted buffer, for OpForward
}

// mappedBuffers is implemented by connections whose buffers are mapped
// outside the Go heap (mmap) and stay where they are until Close. Only
// such memory may be registered with the HCA: the device reads it behind
// the garbage collector's back, which may free and reuse heap memory it
// finds unreferenced.
type mappedBuffers interface {
	// MappedRegions returns the mapped regions that hold the buffers.
	MappedRegions() [][]byte
}

// MappedRegions returns the regions c's buffers are mapped in (see
// mem.go), so that another connection may adopt them: the window's too
// once it is open.
func (c *Conn) MappedRegions() [][]byte {
	if c.win.open.Load() {
		return [][]byte{c.bufs.mem, c.win.mem}
	}
	return [][]byte{c.bufs.mem}
}

// Adopt registers the mapped regions that hold up's receive buffers with
// this connection's protection domain, for PostForward. Call it once up's
// window is open. It refuses a connection that does not report, by a
// MappedRegions method, that every receive buffer lies in memory mapped
// outside the Go heap, and fails where a region cannot be registered.
func (c *Conn) Adopt(up conn.Conn) error {
	m, ok := up.(mappedBuffers)
	if !ok {
		return fmt.Errorf("adopt: the other connection's receive buffers may be Go heap memory, which must not be registered")
	}
	regions := m.MappedRegions()
	in := make([]int, up.RecvBufs()) // the region of each receive buffer
	for i := range in {
		if in[i] = regionOf(regions, up.RecvBuf(i)); in[i] < 0 {
			return fmt.Errorf("adopt: receive buffer %d of the other connection is not in its mapped regions: it may be Go heap memory, which must not be registered", i)
		}
	}
	if len(in) == 0 {
		return fmt.Errorf("adopt: no receive buffers")
	}
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if err := c.life.stopped(); err != nil {
		return err
	}
	if c.fwd.Load() != nil {
		return fmt.Errorf("adopt: already adopted")
	}
	f := &adopted{up: up, lkeys: make([][]C.uint32_t, len(in)), sendLen: make([]atomic.Int32, len(in))}
	pds := []*C.struct_ibv_pd{c.pd}
	for _, n := range c.devs.nics {
		pds = append(pds, n.pd)
	}
	keys := make(map[int][]C.uint32_t) // per region, per device
	for i, k := range in {
		if keys[k] == nil {
			for _, pd := range pds {
				mr, err := C.rp_reg_mr(pd, unsafe.Pointer(unsafe.SliceData(regions[k])), C.size_t(len(regions[k])), 0)
				if mr == nil {
					for _, mr := range f.mrs {
						C.ibv_dereg_mr(mr)
					}
					return fmt.Errorf("adopt: register the %d bytes of the other connection's receive buffers: ibv_reg_mr: %w", len(regions[k]), err)
				}
				f.mrs = append(f.mrs, mr)
				keys[k] = append(keys[k], mr.lkey)
			}
		}
		f.lkeys[i] = keys[k]
	}
	c.fwd.Store(f)
	return nil
}

// regionOf returns the index of the region that holds all of b, -1 if
// none does.
func regionOf(regions [][]byte, b []byte) int {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for k, r := range regions {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
		if len(b) > 0 && len(r) > 0 && p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(r)) {
			return k
		}
	}
	return -1
}

// PostForward posts the first n bytes of the adopted connection's receive
// buffer i as PostSend posts a send buffer; its completion is reported as
// conn.OpForward with Buf i and Len n.
func (c *Conn) PostForward(i, n int) error {
	f := c.fwd.Load()
	if f == nil || i < 0 || i >= f.up.RecvBufs() || n < 0 || n > len(f.up.RecvBuf(i)) {
		return conn.Errorf(conn.KindInternal, "post forward to "+c.peer, "adopted buffer %d, %d bytes: out of range", i, n)
	}
	if err := c.fits(n); err != nil {
		return conn.Errorf(conn.KindInternal, "post forward to "+c.peer, "%v", err)
	}
	c.life.mu.RLock()
	defer c.life.mu.RUnlock()
	if err := c.life.stopped(); err != nil {
		return err
	}
	f.sendLen[i].Store(int32(n))
	c.posts.sendsOut.Add(1)
	if rc := c.postData(wrFwd|uint64(i), unsafe.Pointer(unsafe.SliceData(f.up.RecvBuf(i))), n, f.lkeys[i]); rc != 0 {
		c.posts.sendsOut.Add(-1)
		return &conn.Error{Kind: conn.KindAborted, Op: "post forward to " + c.peer, Err: fmt.Errorf("ibv_post_send: %w", errno(rc))}
	}
	return nil
}
