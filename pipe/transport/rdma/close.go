package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// closeTimeout bounds how long Close waits for queued sends.
const closeTimeout = 2 * time.Second

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
		for _, id := range c.laneIDs {
			C.rdma_disconnect(id)
		}
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
	for _, id := range c.laneIDs {
		if id.qp != nil {
			C.rdma_destroy_qp(id)
		}
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
	if c.winMR != nil {
		rc, err := C.ibv_dereg_mr(c.winMR)
		check("ibv_dereg_mr", rc, err)
	}
	if f := c.fwd.Load(); f != nil {
		for _, mr := range f.mrs {
			rc, err := C.ibv_dereg_mr(mr)
			check("ibv_dereg_mr", rc, err)
		}
	}
	if c.pd != nil {
		rc, err := C.ibv_dealloc_pd(c.pd)
		check("ibv_dealloc_pd", rc, err)
	}
	for _, n := range c.nics {
		n.free(check)
	}
	if c.id != nil {
		rc, err := C.rdma_destroy_id(c.id)
		check("rdma_destroy_id", rc, err)
	}
	for _, id := range c.laneIDs {
		rc, err := C.rdma_destroy_id(id)
		check("rdma_destroy_id", rc, err)
	}
	c.cm.destroy()
	for _, mem := range [][]byte{c.mem, c.winMem} {
		if mem != nil {
			if err := unmapRegion(mem); err != nil {
				errs = append(errs, fmt.Errorf("munmap: %w", err))
			}
		}
	}
	if len(errs) > 0 {
		return &conn.Error{Kind: conn.KindInternal, Op: "close connection to " + c.peer, Err: errors.Join(errs...)}
	}
	return nil
}
