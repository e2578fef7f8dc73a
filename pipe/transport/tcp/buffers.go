package tcp

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// pageSize is the alignment of data buffers.
const pageSize = 4096

// buffers are a connection's send, receive and control buffers, whether
// each send and receive buffer is posted, and the mappings they are carved
// from, outside the Go heap.
type buffers struct {
	send, recv [][]byte
	ctrl       [][]byte      // transport-owned memory for SendControl
	sendBusy   []atomic.Bool // posted and not yet reported by Poll
	recvBusy   []atomic.Bool
	// spareFrom is the first receive buffer for control messages: those
	// before it take data messages only, those from it control messages
	// only (a sender's are all for control messages).
	spareFrom int
	dataSize  int // the size of a data receive buffer, allocated by mapWindow
	ctrlSize  int // the size of a control receive buffer

	windowOnce sync.Once
	mapMu      sync.Mutex
	maps       [][]byte // the mappings the buffers are carved from; unmapped by unmap
}

// newBuffers returns the books of layout l's buffers, whose last spares
// receive buffers take control messages; nothing is mapped yet.
func newBuffers(l conn.Layout, spares int) buffers {
	return buffers{
		recv:      make([][]byte, l.RecvBufs),
		sendBusy:  make([]atomic.Bool, l.SendBufs),
		recvBusy:  make([]atomic.Bool, l.RecvBufs),
		spareFrom: l.RecvBufs - spares,
		dataSize:  l.RecvSize,
		ctrlSize:  min(l.RecvSize, conn.MaxControl),
	}
}

// mapFixed maps and carves the buffers a connection has from the start:
// layout l's send buffers, ctrl control buffers and the spares receive
// buffers for control messages. Send buffers start on a page, so that
// what is read into them suits O_DIRECT.
func (b *buffers) mapFixed(l conn.Layout, ctrl, spares int, remote string) error {
	send := roundUp(l.SendSize, pageSize)
	mem, err := b.mapRegion(l.SendBufs*send+(ctrl+spares)*conn.MaxControl, remote)
	if err != nil {
		return err
	}
	b.send = carve(&mem, l.SendBufs, l.SendSize, send)
	b.ctrl = carve(&mem, ctrl, conn.MaxControl, conn.MaxControl)
	copy(b.recv[b.spareFrom:], carve(&mem, spares, b.ctrlSize, conn.MaxControl))
	return nil
}

// mapWindow maps and carves a receiver's data receive buffers, each on
// its own pages, and marks them posted.
func (b *buffers) mapWindow(remote string) error {
	size := roundUp(b.dataSize, pageSize)
	mem, err := b.mapRegion(b.spareFrom*size, remote)
	if err != nil {
		return err
	}
	copy(b.recv, carve(&mem, b.spareFrom, b.dataSize, size))
	for i := range b.spareFrom {
		b.recvBusy[i].Store(true)
	}
	return nil
}

// mapRegion maps size bytes outside the Go heap, for unmap to unmap, so
// that a relay's RDMA connection may register them to send from (see
// MappedRegions).
func (b *buffers) mapRegion(size int, remote string) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, max(size, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, &conn.Error{Kind: conn.KindSetup, Op: "allocate buffers for " + remote,
			Err: errors.Join(fmt.Errorf("mmap %d bytes: %w", size, err), conn.ErrLocal)}
	}
	b.mapMu.Lock()
	defer b.mapMu.Unlock()
	b.maps = append(b.maps, mem)
	return mem, nil
}

// regions returns the mappings the buffers are carved from.
func (b *buffers) regions() [][]byte {
	b.mapMu.Lock()
	defer b.mapMu.Unlock()
	return slices.Clone(b.maps)
}

// unmap unmaps every mapping; the buffers must not be used afterwards.
func (b *buffers) unmap() error {
	b.mapMu.Lock()
	defer b.mapMu.Unlock()
	var err error
	for _, m := range b.maps {
		err = errors.Join(err, unix.Munmap(m))
	}
	b.maps = nil
	return err
}

// carve cuts n buffers of size bytes, stride bytes apart, off the front of
// *mem.
func carve(mem *[]byte, n, size, stride int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = (*mem)[:size:size]
		*mem = (*mem)[stride:]
	}
	return bufs
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
