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

const (
	// bufAlign is the alignment of every buffer in the region: a page, so
	// that payloads (which start their messages) suit O_DIRECT and pwrite.
	bufAlign = 4096
	// ctrlAlign is the alignment of the small buffers: a cache line.
	ctrlAlign = 64
	// hugePage is the huge page size asked for large regions (MAP_HUGE_2MB).
	hugePage = 2 << 20
)

// mapBuffers maps one region for all buffers of l plus the control ring
// and registers it. A receiver offering a ring (c.slots > 0) has only its
// ring's buffers of l.RecvSize, spares of pipe.MaxControl bytes, and notes
// buffers of that size for its receive work requests; its region is
// registered for remote writes.
func (c *Conn) mapBuffers(l pipe.Layout, notes int) error {
	recvs, spares := l.RecvBufs, 0
	if c.slots > 0 {
		recvs, spares = c.slots, l.RecvBufs-c.slots
	} else {
		notes = 0
	}
	// Receive buffers that only ever hold control messages (a sender's)
	// need no page each.
	recvAlign := bufAlign
	if l.RecvSize <= pipe.MaxControl {
		recvAlign = ctrlAlign
	}
	small := roundUp(pipe.MaxControl, ctrlAlign)
	size := roundUp(l.SendBufs*roundUp(l.SendSize, bufAlign)+recvs*roundUp(l.RecvSize, recvAlign), bufAlign) +
		(spares+notes+ctrlSlots)*small
	mem, err := mapRegion(size)
	if err != nil {
		return fmt.Errorf("map %d bytes of buffers: %w", size, err)
	}
	c.mem = mem
	off := 0
	carve := func(n, size, align int) [][]byte {
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = mem[off : off+size : off+size]
			off += roundUp(size, align)
		}
		return bufs
	}
	c.send = carve(l.SendBufs, l.SendSize, bufAlign)
	c.recv = carve(recvs, l.RecvSize, recvAlign)
	off = roundUp(off, bufAlign)
	c.recv = append(c.recv, carve(spares, pipe.MaxControl, ctrlAlign)...)
	c.notes = carve(notes, pipe.MaxControl, ctrlAlign)
	c.ctrl = carve(ctrlSlots, pipe.MaxControl, ctrlAlign)

	raiseMemlock()
	remote := C.int(0)
	if c.slots > 0 {
		remote = 1
	}
	if c.mr, err = C.rp_reg_mr(c.pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), remote); c.mr == nil {
		return registerError(len(mem), err)
	}
	c.lkey = c.mr.lkey
	return nil
}

// mapping is one way of mapping a region: its length, a multiple of the
// page size it uses, and the mmap flags that ask for that page size.
type mapping struct {
	length int
	flags  int
}

// mappings returns the ways to map size bytes, best first, for a system
// page size of page: 2 MiB huge pages (asked for explicitly, MAP_HUGE_2MB,
// so that a host whose default huge page size is 1 GiB does not pin 1 GiB
// per region) when the region is at least that large, then normal pages.
// Each length is size rounded up to the page size that mapping uses.
func mappings(size, page int) []mapping {
	const base = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	normal := mapping{length: roundUp(size, page), flags: base}
	if size < hugePage {
		return []mapping{normal}
	}
	return []mapping{{length: roundUp(size, hugePage), flags: base | unix.MAP_HUGETLB | unix.MAP_HUGE_2MB}, normal}
}

// mapRegion maps at least size bytes of anonymous memory outside the Go
// heap, on 2 MiB huge pages if the region is large enough and the host has
// some free, and returns the whole mapping: unmapRegion must be given it
// as it is, so that munmap gets exactly the mapped length.
func mapRegion(size int) ([]byte, error) {
	var err error
	for _, m := range mappings(size, unix.Getpagesize()) {
		var p unsafe.Pointer
		if p, err = unix.MmapPtr(-1, 0, nil, uintptr(m.length), unix.PROT_READ|unix.PROT_WRITE, m.flags); err == nil {
			return unsafe.Slice((*byte)(p), m.length), nil
		}
	}
	return nil, err
}

// unmapRegion unmaps a region returned by mapRegion.
func unmapRegion(mem []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)))
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
