package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe"
	"golang.org/x/sys/unix"
)

// Buffer memory: one anonymous mapping per connection, outside the Go heap,
// carved into the layout's buffers and registered once.

// mapBuffers maps one region for all buffers of l plus the control ring
// and registers it.
func (c *Conn) mapBuffers(l pipe.Layout) error {
	size := l.SendBufs*roundUp(l.SendSize, bufAlign) + l.RecvBufs*roundUp(l.RecvSize, bufAlign) +
		ctrlSlots*roundUp(pipe.MaxControl, bufAlign)
	mem, err := mapRegion(size)
	if err != nil {
		return fmt.Errorf("map %d bytes of buffers: %w", size, err)
	}
	c.mem = mem
	off := 0
	carve := func(n, size int) [][]byte {
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = mem[off : off+size : off+size]
			off += roundUp(size, bufAlign)
		}
		return bufs
	}
	c.send = carve(l.SendBufs, l.SendSize)
	c.recv = carve(l.RecvBufs, l.RecvSize)
	c.ctrl = carve(ctrlSlots, pipe.MaxControl)

	raiseMemlock()
	if c.mr, err = C.rp_reg_mr(c.pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem))); c.mr == nil {
		return registerError(len(mem), err)
	}
	c.lkey = c.mr.lkey
	return nil
}

// mapRegion maps size bytes of anonymous memory outside the Go heap, on
// huge pages if the region is large enough and huge pages are available.
func mapRegion(size int) ([]byte, error) {
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if size >= hugePage {
		if mem, err := unix.Mmap(-1, 0, roundUp(size, hugePage), prot, flags|unix.MAP_HUGETLB); err == nil {
			return mem, nil
		}
	}
	return unix.Mmap(-1, 0, roundUp(size, unix.Getpagesize()), prot, flags)
}

// raiseMemlock raises the soft RLIMIT_MEMLOCK to the hard limit: memory
// registration pins pages and counts against it.
func raiseMemlock() {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim)
	}
}

// registerError explains a failed ibv_reg_mr of n bytes, pointing at the
// locked-memory limit when that is the likely cause.
func registerError(n int, err error) error {
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("register %d bytes of buffers: ibv_reg_mr: %w", n, err)
	}
	limit := "unknown"
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		limit = fmt.Sprintf("%d KiB", lim.Cur/1024)
		if lim.Cur == unix.RLIM_INFINITY {
			limit = "unlimited"
		}
	}
	return fmt.Errorf("register %d bytes of buffers: ibv_reg_mr: %w: the locked-memory limit (RLIMIT_MEMLOCK) is %s; "+
		"raise it to at least %d KiB per connection, or unlimited: `ulimit -l unlimited` in the shell, "+
		"a memlock line in /etc/security/limits.conf, or LimitMEMLOCK=infinity for a systemd service",
		n, err, limit, (n+1023)/1024)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
