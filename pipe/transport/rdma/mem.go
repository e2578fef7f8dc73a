package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
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

// buffers are a connection's region, registered for local access only,
// and the buffers carved from it; a receiver's window buffers,
// recv[:win.count], are carved from a region of their own (see OpenWindow).
type buffers struct {
	mem              []byte // the mapped region
	mr               *C.struct_ibv_mr
	lkey             C.uint32_t
	send, recv, ctrl [][]byte
	pinned           atomic.Int64 // bytes registered, for Info
}

// mapBuffers maps one region for the buffers of l, but for a receiver's
// window (see OpenWindow), plus the control ring, and registers it for
// local access only: nothing in it is the peer's to write. A receiver
// offering a ring (c.recvRing.slots > 0) gives its spares conn.MaxControl bytes
// each and has notes buffers of that size for its receive work requests.
// On the SEND data path a receiver's spares are as large as its data
// buffers: a receive queue is first in, first out, so once the window is
// open a data message may land in a spare posted before it.
func (c *Conn) mapBuffers(l conn.Layout, notes int) error {
	spares, spareSize := l.RecvBufs-c.win.count, l.RecvSize
	if c.recvRing.slots > 0 {
		spareSize = conn.MaxControl
	} else {
		notes = 0
	}
	spareAlign := alignFor(spareSize)
	size := buffersSize(l.SendBufs, l.SendSize, spares, spareSize, notes)
	mem, err := mapRegion(size)
	if err != nil {
		return fmt.Errorf("map %d bytes of buffers: %w", size, err)
	}
	c.bufs.mem, c.win.dataSize = mem, l.RecvSize
	off := 0
	carve := func(n, size, align int) [][]byte {
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = mem[off : off+size : off+size]
			off += roundUp(size, align)
		}
		return bufs
	}
	c.bufs.send = carve(l.SendBufs, l.SendSize, bufAlign)
	c.bufs.recv = append(make([][]byte, c.win.count), carve(spares, spareSize, spareAlign)...)
	off = roundUp(off, bufAlign)
	c.recvRing.notes = carve(notes, conn.MaxControl, ctrlAlign)
	c.bufs.ctrl = carve(ctrlSlots, conn.MaxControl, ctrlAlign)
	if c.bufs.mr, err = register(c.pd, mem, false); err != nil {
		return err
	}
	c.bufs.lkey = c.bufs.mr.lkey
	c.bufs.pinned.Store(int64(len(mem)))
	return nil
}

// alignFor is the alignment of buffers of size bytes in a region: a
// page, but a cache line for buffers that only ever hold control
// messages, which need no page each.
func alignFor(size int) int {
	if size <= conn.MaxControl {
		return ctrlAlign
	}
	return bufAlign
}

// buffersSize is the length of the region mapBuffers carves: send buffers
// of sendSize bytes and spares of spareSize on their alignments, rounded
// to a page, then notes and the control ring of conn.MaxControl bytes
// each on cache lines.
func buffersSize(sends, sendSize, spares, spareSize, notes int) int {
	small := roundUp(conn.MaxControl, ctrlAlign)
	return roundUp(sends*roundUp(sendSize, bufAlign)+spares*roundUp(spareSize, alignFor(spareSize)), bufAlign) +
		(notes+ctrlSlots)*small
}

// windowSize is the length of the region openWindow maps for window data
// buffers of dataSize bytes, each on its own pages.
func windowSize(window, dataSize int) int { return window * roundUp(dataSize, bufAlign) }

// Pinned returns the most memory one side of a connection with parameters
// p registers on one device, and so locks against RLIMIT_MEMLOCK: a
// sender's (receiver false) or a receiver's with its window open, on
// either data path and with as many lanes as o grants, each region at the
// length mapRegion would map it now (on huge pages only while the host has
// enough free). A connection striped over n devices registers it n times.
func (o Options) Pinned(p conn.Params, receiver bool) int64 {
	most := 0
	for _, sizes := range o.regionSizes(p, receiver) {
		r, n := newRegions(), 0
		for _, size := range sizes {
			n += r.length(size)
		}
		most = max(most, n)
	}
	return int64(most)
}

// HugePages returns how many 2 MiB huge pages the regions Pinned counts
// take at most when the host has them free; regions under 2 MiB take none.
func (o Options) HugePages(p conn.Params, receiver bool) int {
	most := 0
	for _, sizes := range o.regionSizes(p, receiver) {
		n := 0
		for _, size := range sizes {
			if m := mappings(size, bufAlign); len(m) > 1 {
				n += m[0].length / hugePage
			}
		}
		most = max(most, n)
	}
	return most
}

// regionSizes returns, for each data path o allows, the sizes of the
// regions one side of a connection with parameters p maps, in order.
func (o Options) regionSizes(p conn.Params, receiver bool) [][]int {
	if !receiver {
		l := conn.SenderLayout(p)
		return [][]int{{buffersSize(l.SendBufs, l.SendSize, l.RecvBufs, l.RecvSize, 0)}}
	}
	l := conn.ReceiverLayout(p)
	spares, window := l.RecvBufs-p.Credits(), windowSize(p.Credits(), l.RecvSize)
	sets := [][]int{{buffersSize(0, 0, spares, l.RecvSize, 0), window}}
	if !o.SendOnly {
		lanes := maxLanes
		if o.QPs > 0 {
			lanes = min(o.QPs, maxLanes)
		}
		sets = append(sets, []int{buffersSize(0, 0, spares, conn.MaxControl, lanes*(l.RecvBufs+noteSlack)), window})
	}
	return sets
}

// regions follows the lengths mapRegion maps, one region after another,
// on a host with page size page and huge free 2 MiB huge pages.
type regions struct{ page, huge int }

// newRegions returns regions for this host as it is now.
func newRegions() *regions { return &regions{page: unix.Getpagesize(), huge: freeHugePages()} }

// length is the length of the next region mapRegion maps for size bytes.
func (r *regions) length(size int) int {
	m := mappings(size, r.page)
	if n := m[0].length / hugePage; len(m) > 1 && n <= r.huge {
		r.huge -= n
		return m[0].length
	}
	return m[len(m)-1].length
}

// freeHugePages returns how many 2 MiB huge pages the host has free (0
// when it cannot tell), which mapRegion's MAP_HUGE_2MB mappings take.
func freeHugePages() int {
	b, err := os.ReadFile("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// register registers mem with pd for local writes, and for remote writes
// too if remote.
func register(pd *C.struct_ibv_pd, mem []byte, remote bool) (*C.struct_ibv_mr, error) {
	raiseMemlock()
	rw := C.int(0)
	if remote {
		rw = 1
	}
	mr, err := C.rp_reg_mr(pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), rw)
	if mr == nil {
		return nil, registerError(len(mem), err)
	}
	return mr, nil
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
