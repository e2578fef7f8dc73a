package sendrecv

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/internal/units"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// window is a chunk size and depth, and why they were chosen, and the
// locked-memory limit they were chosen for (0 when there is none).
type window struct {
	chunk, depth int
	why          string
	limit        uint64
}

// The window used where locking memory is not limited, as on most RDMA
// hosts: 4 MiB chunks (a third fewer per-message costs than 1 MiB in the
// SoftRoCE VM) and 8 buffers. The receiver then locks 36 MiB, the sender
// 32 MiB.
const (
	bigChunk = 4 << 20
	bigDepth = 8
)

// capIPCLock is the capability that lifts RLIMIT_MEMLOCK.
const capIPCLock = 14

// defaultWindow returns the window for a host where a process may lock
// limit bytes (the hard RLIMIT_MEMLOCK, which the RDMA transport raises
// the soft limit to), or any amount if unlimited: the largest chunk, from
// 4 MiB down, with which both sides' buffers (see locks) fit with a depth
// of 4 or more, and the largest such depth up to 8.
func defaultWindow(limit uint64, unlimited bool) window {
	if unlimited {
		return window{bigChunk, bigDepth, "locked memory is not limited here", 0}
	}
	why := fmt.Sprintf("RLIMIT_MEMLOCK is %s here", units.Size(int64(limit)))
	for chunk := bigChunk; chunk >= 64<<10; chunk /= 2 {
		if depth, ok := fittingDepth(chunk, limit, 4); ok {
			return window{chunk, depth, why, limit}
		}
	}
	return window{64 << 10, conn.MinDepth, why + " (too little for RDMA: raise it with ulimit -l)", limit}
}

// withChunk is w for a chunk size the user chose: with the largest depth
// up to bigDepth whose buffers fit the locked-memory limit, if any does.
func (w window) withChunk(chunk int) window {
	w.chunk, w.why = chunk, "--chunk-size"
	if w.limit == 0 {
		w.depth = bigDepth
		return w
	}
	w.depth, _ = fittingDepth(chunk, w.limit, conn.MinDepth)
	return w
}

// fittingDepth returns the largest depth from bigDepth down to least whose
// buffers for chunk fit in limit bytes of locked memory, or least and false
// if none does.
func fittingDepth(chunk int, limit uint64, least int) (int, bool) {
	for depth := bigDepth; depth >= least; depth-- {
		if locks(chunk, depth) <= limit {
			return depth, true
		}
	}
	return least, false
}

// locks is how much memory one side registers for chunk and depth at most
// (the larger of the sender's and the receiver's, as the RDMA transport
// lays them out): chunk buffers on whole pages, buffers of a control
// message's size and the transport's own control buffers on cache lines,
// the whole rounded up to pages, or to 2 MiB huge pages when it is that
// large.
func locks(chunk, depth int) uint64 {
	p := conn.NewParams(chunk, depth)
	need := 0
	for _, l := range []conn.Layout{conn.SenderLayout(p), conn.ReceiverLayout(p)} {
		need = max(need, bufBytes(l.SendBufs, l.SendSize)+bufBytes(l.RecvBufs, l.RecvSize)+controlBytes)
	}
	const page, huge = 4 << 10, 2 << 20
	if need >= huge {
		return uint64(roundUp(need, huge))
	}
	return uint64(roundUp(need, page))
}

// controlBytes is about what the RDMA transport registers beyond the
// layout: its control and notification buffers, a few dozen of
// conn.MaxControl bytes.
const controlBytes = 16 << 10

// bufBytes is how much n buffers of size bytes take in a registered region.
func bufBytes(n, size int) int {
	if size <= conn.MaxControl {
		return n * size
	}
	return n * roundUp(size, 4<<10)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// hostWindow is defaultWindow for this process: its hard RLIMIT_MEMLOCK,
// and whether it holds CAP_IPC_LOCK (root usually does), which lifts it.
func hostWindow() window {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return window{conn.DefaultChunk, conn.DefaultDepth, fmt.Sprintf("RLIMIT_MEMLOCK unknown (%v)", err), 0}
	}
	if lim.Max == unix.RLIM_INFINITY {
		return defaultWindow(0, true)
	}
	if hasCapIPCLock() {
		w := defaultWindow(0, true)
		w.why = "this process may lock memory without limit (CAP_IPC_LOCK)"
		return w
	}
	return defaultWindow(lim.Max, false)
}

// hasCapIPCLock reports whether this process holds CAP_IPC_LOCK.
func hasCapIPCLock() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[capIPCLock/32].Effective&(1<<(capIPCLock%32)) != 0
}

// describe is the -v line that says which window this side asks for and
// how much memory that locks here at most (the peer's answer may be
// smaller, and the RDMA write data path needs less on the receiver).
func (w window) describe(name string, receiver bool) string {
	return fmt.Sprintf("%s: chunk %s x depth %d (%s): buffers of up to %s on this side", name, units.Size(int64(w.chunk)), w.depth, w.why, formatMiB(w.locks(receiver)))
}

// locks is how much buffer memory the window registers at most on the
// sender's or the receiver's side.
func (w window) locks(receiver bool) int64 {
	p := conn.NewParams(w.chunk, w.depth)
	if receiver {
		l := conn.ReceiverLayout(p)
		return int64(l.RecvBufs * l.RecvSize)
	}
	l := conn.SenderLayout(p)
	return int64(l.SendBufs * l.SendSize)
}

// short names the window, e.g. "4 MiB x 8".
func (w window) short() string { return fmt.Sprintf("%s x %d", units.Size(int64(w.chunk)), w.depth) }

// formatMiB prints a byte count in MiB with one decimal.
func formatMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
